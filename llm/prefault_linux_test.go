package llm

import (
	"bytes"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// prefault maps the whole pages inside the buffer and changes no byte of
// it, nor of the memory around it.
func TestPrefaultMapsPagesAndKeepsBytes(t *testing.T) {
	const size = 1 << 20
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Skip(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	page := unix.Getpagesize()
	resident := func() int {
		vec := make([]byte, size/page)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), size, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	// The first and last page hold bytes of "other" memory; the buffer
	// starts and ends inside them.
	m[100] = 'a'
	m[size-100] = 'z'
	if got := resident(); got != 2 {
		t.Fatalf("%d pages resident before", got)
	}
	// A kernel before 5.14 has no MADV_POPULATE_WRITE: prefault then does
	// nothing, by design (the pages fault in one by one as before).
	if err := unix.Madvise(m[:page], unix.MADV_POPULATE_WRITE); err == unix.EINVAL {
		t.Skip("no MADV_POPULATE_WRITE on this kernel")
	}
	buf := m[200 : 200 : size-200]
	prefault(buf)
	if got := resident(); got != size/page {
		t.Fatalf("%d of %d pages resident after prefault", got, size/page)
	}
	if m[100] != 'a' || m[size-100] != 'z' || bytes.Count(m, []byte{0}) != size-2 {
		t.Fatal("prefault changed bytes")
	}

	// A heap buffer with text in it keeps it; small buffers are left alone.
	heap := make([]byte, 200<<10)
	for i := range heap {
		heap[i] = byte(i % 251)
	}
	want := bytes.Clone(heap)
	prefault(heap[1234:1234])
	prefault(heap[:10])
	if !bytes.Equal(heap, want) {
		t.Fatal("prefault changed a heap buffer")
	}
}
