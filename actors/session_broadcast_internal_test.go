package actors

import (
	"bytes"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// A streamed chunk's frame may come back to its model call once written
// (Frame.Written) only when nothing else holds its bytes: the one client
// it went to. A frame the follow log keeps, or one sent to several
// clients, must stay as it was after one outlet wrote it — were it given
// back, the call's next chunk would be copied over bytes that a follower,
// or the other client, has still to be sent.
func TestBroadcastGivesBackOnlyFramesWithOneOwner(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()

	got := make(chan *outbound, 8)
	recorder := func() *actor.PID {
		return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(*outbound); ok {
				got <- m
			}
		}))
	}
	type broadcastNow struct {
		s *session
		m *outbound
	}
	driver := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*broadcastNow); ok {
			m.s.broadcast(ctx, m.m)
		}
	}))

	cases := []struct {
		name      string
		clients   int
		following bool
		givenBack bool
	}{
		{"one client, nothing kept", 1, false, true},
		{"one client, the follow log on", 1, true, false},
		{"two clients", 2, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &session{id: "s"}
			for range c.clients {
				s.clients.list = append(s.clients.list, &client{pid: recorder()})
			}
			s.followers.on = c.following
			pool := &framePool{}
			data := []byte(`{"jsonrpc":"2.0","method":"session/update","params":{"chunk":"one"}}`)
			want := bytes.Clone(data)
			sys.Root.Send(driver, &broadcastNow{s: s, m: &outbound{frame: Frame{Data: data, SessionID: "s", pool: pool}}})

			for i := range c.clients {
				select {
				case m := <-got:
					m.frame.Written() // what the stdio writer does once written
				case <-time.After(5 * time.Second):
					t.Fatalf("client %d got no frame", i)
				}
			}
			// The call asks for a buffer for its next chunk and copies it in.
			next := pool.get(len(data))
			if (next != nil) != c.givenBack {
				t.Fatalf("frame given back = %v, want %v", next != nil, c.givenBack)
			}
			if next != nil {
				copy(next[:cap(next)], bytes.Repeat([]byte("x"), cap(next)))
			}
			if c.following {
				if len(s.followers.frames) != 1 || !bytes.Equal(s.followers.frames[0], want) {
					t.Fatalf("the follow log holds %q, want %q", s.followers.frames, want)
				}
			}
			if !c.givenBack && !bytes.Equal(data, want) {
				t.Fatalf("a frame still held elsewhere was overwritten: %q", data)
			}
		})
	}
}
