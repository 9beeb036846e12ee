package native

import (
	"errors"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed"
)

func TestNoticeRoundTrip(t *testing.T) {
	cause := &distributed.OpError{Op: "reducescatter", Seq: 77, Rank: 3, Peer: 5, Err: errors.New(strings.Repeat("x", 600))}
	got, err := decodeNotice(encodeNotice(cause), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.Op != "reducescatter" || got.Seq != 77 || got.Rank != 3 || got.Peer != 5 || !errors.Is(got, distributed.ErrAborted) {
		t.Errorf("decoded %+v", got)
	}
	var ra *distributed.RemoteAbortError
	if !errors.As(got, &ra) || ra.From != 3 || len(ra.Msg) != noticeLen-34 {
		t.Errorf("cause %+v", got.Err)
	}
}

// FuzzDecodeNotice: arbitrary bytes never panic and never yield more text
// than a notice holds.
func FuzzDecodeNotice(f *testing.F) {
	f.Add(encodeNotice(&distributed.OpError{Op: "allreduce", Seq: 1, Peer: -1, Err: errors.New("boom")}))
	f.Add(make([]byte, noticeLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeNotice(b, 1)
		if err != nil {
			return
		}
		if len(n.Op) > 15 || len(n.Err.Error()) > noticeLen {
			t.Fatalf("oversized notice fields: %q", n.Op)
		}
		_ = n.Error()
	})
}
