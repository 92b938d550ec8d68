package actors

import (
	"testing"

	"github.com/iac-code/iac-code/store"
)

// A fork copies its source's history, spilled outputs' names included:
// deleting either must leave those files to the other.
func TestSharesHistoryOfForksAndTheirSources(t *testing.T) {
	st, err := store.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	open := func(id string) store.Meta {
		s, err := st.Create(store.Meta{ID: id, Cwd: "/w", Mode: "default"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Meta()
	}
	src, alone := open("11111111-1111-4111-8111-111111111111"), open("22222222-2222-4222-8222-222222222222")
	fork, _, err := st.Fork(src.ID, "33333333-3333-4333-8333-333333333333")
	if err != nil {
		t.Fatal(err)
	}
	forkMeta := fork.Meta()
	fork.Close()
	if !sharesHistory(st, src) {
		t.Error("the source of a fork keeps its outputs to itself")
	}
	if !sharesHistory(st, forkMeta) {
		t.Error("a fork keeps its outputs to itself")
	}
	if sharesHistory(st, alone) {
		t.Error("a session never forked shares its outputs")
	}
}
