package ddp

import (
	"context"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// CheckSameModel checks that every rank of pg holds a model with the same
// parameters and buffers, as Wrap does (see the wrapcore check it runs);
// a mismatch names the first differing rank. Every rank must call it at
// the same point.
func CheckSameModel(ctx context.Context, pg distributed.ProcessGroup, params []nn.NamedParameter, buffers []nn.NamedBuffer) error {
	return wrapcore.CheckSameModel(ctx, "ddp", pg, params, buffers)
}

// broadcastState copies root's buffers (and, with params, parameters) to
// every rank, coalesced into messages of at most BucketCapBytes.
func (m *Model) broadcastState(ctx context.Context, root int, params bool) error {
	if m.world == 1 {
		return nil
	}
	var ts []*tensor.Tensor
	if params {
		for _, np := range m.params {
			ts = append(ts, np.Param.Value)
		}
	}
	for _, nb := range m.buffers {
		ts = append(ts, nb.Buffer)
	}
	if len(ts) == 0 {
		return nil
	}
	if !m.dev.IsCPU() { // each tensor in place on the device
		for _, t := range ts {
			if err := distributed.BroadcastTensor(ctx, m.pg, t, root).Wait(); err != nil {
				return err
			}
		}
		return nil
	}
	limit := int(m.o.BucketCapBytes / gradElemBytes)
	for len(ts) > 0 {
		// Take tensors until the chunk is full (at least one).
		n, total := 0, 0
		for n < len(ts) && (n == 0 || total+ts[n].Len() <= limit) {
			total += ts[n].Len()
			n++
		}
		if cap(m.bufFlat) < total {
			m.bufFlat = make([]float32, total)
		}
		buf := m.bufFlat[:total]
		if m.rank == root {
			k := 0
			for _, t := range ts[:n] {
				k += copy(buf[k:], t.Data())
			}
		}
		if err := m.pg.Broadcast(ctx, distributed.F32(buf), root).Wait(); err != nil {
			return err
		}
		if m.rank != root {
			k := 0
			for _, t := range ts[:n] {
				k += copy(t.Data(), buf[k:])
			}
		}
		ts = ts[n:]
	}
	return nil
}
