package proc

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
)

// Section is how much of one section of a process's executable is in its
// page tables: which of the binary's pages (text, rodata, pclntab, data)
// make its RssFile.
type Section struct {
	Name          string
	Size, Present int64 // bytes; Present counts whole 4 KiB pages
}

// ExecutablePages reads, for each allocated section of pid's executable,
// how many of its pages are present in pid's page tables
// (/proc/<pid>/pagemap; the present bit needs no privilege).
func ExecutablePages(pid int) ([]Section, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		return nil, err
	}
	f, err := elf.Open(dir + "/exe")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	maps, err := os.Open(dir + "/maps")
	if err != nil {
		return nil, err
	}
	defer maps.Close()
	pagemap, err := os.Open(dir + "/pagemap")
	if err != nil {
		return nil, err
	}
	defer pagemap.Close()
	const page = 4096
	present := map[uint64]bool{} // virtual page addresses of the executable's mappings
	var bias uint64
	biasKnown := false
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if off == 0 && !biasKnown { // a PIE's first load segment has address 0 in the file
			bias, biasKnown = start-firstLoad(f), true
		}
		buf := make([]byte, (end-start)/page*8)
		if _, err := pagemap.ReadAt(buf, int64(start/page*8)); err != nil {
			return nil, err
		}
		for i := range (end - start) / page {
			if binary.LittleEndian.Uint64(buf[i*8:])&(1<<63) != 0 {
				present[start+i*page] = true
			}
		}
	}
	var out []Section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		sec := Section{Name: s.Name, Size: int64(s.Size)}
		for a := (s.Addr + bias) &^ (page - 1); a < s.Addr+bias+s.Size; a += page {
			if present[a] {
				sec.Present += page
			}
		}
		out = append(out, sec)
	}
	return out, nil
}

// firstLoad is the page-aligned address of f's first load segment.
func firstLoad(f *elf.File) uint64 {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			return p.Vaddr &^ 4095
		}
	}
	return 0
}
