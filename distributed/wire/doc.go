// Package wire is the framing of cohort's stream transports: a fixed
// 32-byte header followed by a payload whose length the header gives, and
// the payload of the connection handshake.
//
// Header layout, little-endian:
//
//	offset size field
//	0      2    magic    0xC0 0x47 ("cohort", not a cohort frame otherwise)
//	2      1    version  Version
//	3      1    kind     Kind
//	4      4    length   payload bytes after the header
//	8      4    group    tag: the process group
//	12     4    step     tag: the algorithm step
//	16     8    seq      tag: the op's sequence number
//	24     8    aux      kind-specific (message length, offset)
//
// DecodeHeader checks the magic, version and kind and bounds the length
// by a caller-given limit before anything is allocated for the payload, so
// a garbage or hostile frame costs at most an error.
package wire
