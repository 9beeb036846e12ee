package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// amxCases pairs each AMX encoding with its GNU as source (AT&T order)
// and the bytes GNU as 2.40 assembles it to: every instruction, VEX R, X
// and B set and clear, SIB with and without an index, BP/R13 and SP/R12
// bases, 8- and 32-bit displacements.
var amxCases = []struct {
	asm  string
	got  []byte
	want []byte
}{
	{"ldtilecfg (%rax)", ldtilecfg(regAX, 0), []byte{0xc4, 0xe2, 0x78, 0x49, 0x00}},
	{"ldtilecfg (%r9)", ldtilecfg(9, 0), []byte{0xc4, 0xc2, 0x78, 0x49, 0x01}},
	{"ldtilecfg (%rsp)", ldtilecfg(4, 0), []byte{0xc4, 0xe2, 0x78, 0x49, 0x04, 0x24}},
	{"ldtilecfg (%r13)", ldtilecfg(13, 0), []byte{0xc4, 0xc2, 0x78, 0x49, 0x45, 0x00}},
	{"ldtilecfg 0x200(%rbp)", ldtilecfg(5, 512), []byte{0xc4, 0xe2, 0x78, 0x49, 0x85, 0x00, 0x02, 0x00, 0x00}},
	{"tilerelease", tilerelease(), []byte{0xc4, 0xe2, 0x78, 0x49, 0xc0}},
	{"tilezero %tmm0", tilezero(0), []byte{0xc4, 0xe2, 0x7b, 0x49, 0xc0}},
	{"tilezero %tmm7", tilezero(7), []byte{0xc4, 0xe2, 0x7b, 0x49, 0xf8}},
	{"tileloadd (%rsi,%rdx,1), %tmm4", tileloadd(4, regSI, regDX, 0), []byte{0xc4, 0xe2, 0x7b, 0x4b, 0x24, 0x16}},
	{"tileloadd (%r8,%r11,1), %tmm5", tileloadd(5, regR8, regR11, 0), []byte{0xc4, 0x82, 0x7b, 0x4b, 0x2c, 0x18}},
	{"tileloadd 64(%rbx,%r12,1), %tmm7", tileloadd(7, regBX, 12, 64), []byte{0xc4, 0xa2, 0x7b, 0x4b, 0x7c, 0x23, 0x40}},
	{"tileloadd (%r13,%rax,1), %tmm1", tileloadd(1, 13, regAX, 0), []byte{0xc4, 0xc2, 0x7b, 0x4b, 0x4c, 0x05, 0x00}},
	{"tilestored %tmm0, (%rdi,%rcx,1)", tilestored(0, regDI, regCX, 0), []byte{0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x0f}},
	{"tilestored %tmm3, 64(%r13,%r9,1)", tilestored(3, 13, 9, 64), []byte{0xc4, 0x82, 0x7a, 0x4b, 0x5c, 0x0d, 0x40}},
	{"tilestored %tmm2, 2048(%rdi,%r11,1)", tilestored(2, regDI, regR11, 2048), []byte{0xc4, 0xa2, 0x7a, 0x4b, 0x94, 0x1f, 0x00, 0x08, 0x00, 0x00}},
	{"tilestored %tmm6, -8(%r12,%r15,1)", tilestored(6, 12, 15, -8), []byte{0xc4, 0x82, 0x7a, 0x4b, 0x74, 0x3c, 0xf8}},
	{"tdpbf16ps %tmm6, %tmm4, %tmm0", tdpbf16ps(0, 4, 6), []byte{0xc4, 0xe2, 0x4a, 0x5c, 0xc4}},
	{"tdpbf16ps %tmm7, %tmm5, %tmm3", tdpbf16ps(3, 5, 7), []byte{0xc4, 0xe2, 0x42, 0x5c, 0xdd}},
	{"tdpbf16ps %tmm1, %tmm2, %tmm3", tdpbf16ps(3, 2, 1), []byte{0xc4, 0xe2, 0x72, 0x5c, 0xda}},
	{"tdpbf16ps %tmm0, %tmm7, %tmm6", tdpbf16ps(6, 7, 0), []byte{0xc4, 0xe2, 0x7a, 0x5c, 0xf7}},
}

// TestAMXEncoding checks the encoder against GNU as's bytes, recorded
// above.
func TestAMXEncoding(t *testing.T) {
	for _, c := range amxCases {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: encoded % x, want % x", c.asm, c.got, c.want)
		}
	}
}

// TestAMXEncodingAgainstAs assembles every case with the GNU as on PATH
// (binutils 2.36 or later knows AMX) and compares its bytes with the
// encoder's, so that the recorded bytes cannot drift from as's.
func TestAMXEncodingAgainstAs(t *testing.T) {
	as, err := exec.LookPath("as")
	if err != nil {
		t.Skip("GNU as not on PATH")
	}
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not on PATH")
	}
	dir := t.TempDir()
	var src strings.Builder
	for _, c := range amxCases {
		src.WriteString(c.asm + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "amx.s"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(dir, "amx.o")
	if out, err := exec.Command(as, "--64", "-o", obj, filepath.Join(dir, "amx.s")).CombinedOutput(); err != nil {
		t.Skipf("%s does not assemble AMX (binutils 2.36 or later does): %v: %s", as, err, bytes.TrimSpace(out))
	}
	out, err := exec.Command(objdump, "-d", "-w", obj).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	// Lines "  addr:\tbytes \tmnemonic".
	line := regexp.MustCompile(`(?m)^\s+[0-9a-f]+:\t((?:[0-9a-f]{2} )+)\s*\t`)
	var got [][]byte
	for _, m := range line.FindAllStringSubmatch(string(out), -1) {
		var b []byte
		for _, h := range strings.Fields(m[1]) {
			v, _ := strconv.ParseUint(h, 16, 8)
			b = append(b, byte(v))
		}
		got = append(got, b)
	}
	if len(got) != len(amxCases) {
		t.Fatalf("objdump shows %d instructions, want %d:\n%s", len(got), len(amxCases), out)
	}
	for i, c := range amxCases {
		if !bytes.Equal(c.got, got[i]) {
			t.Errorf("%s: encoded % x, GNU as % x", c.asm, c.got, got[i])
		}
	}
}
