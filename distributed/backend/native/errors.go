package native

import (
	"errors"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/transport"
)

// peerOf digs the implicated peer (a global rank) out of an op's failure.
func peerOf(err error) int {
	var de *collective.DesyncError
	if errors.As(err, &de) {
		return de.Peer
	}
	var se *collective.StepError
	if errors.As(err, &se) && se.Peer >= 0 {
		return se.Peer
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) {
		return pe.Peer
	}
	var oe *distributed.OpError
	if errors.As(err, &oe) {
		return oe.Peer
	}
	return -1
}
