package datasets

import (
	"strconv"
	"sync"
	"testing"

	"github.com/cohortml/cohort/data"
)

var (
	benchOnce  sync.Once
	benchTrain *MNIST
	benchErr   error
)

func benchMNIST(b *testing.B) *MNIST {
	benchOnce.Do(func() { benchTrain, _, benchErr = LoadMNIST("") })
	if benchErr != nil {
		b.Skipf("MNIST not available: %v", benchErr)
	}
	return benchTrain
}

// BenchmarkLoaderMNIST times whole epochs of the MNIST training set
// through the Loader: PyTorch's DistributedSampler order, 937 batches of
// 64 (drop last), including building the epoch's plan; it reports
// samples/s and µs/batch. The anchor MLP trains at about 6,000 samples/s,
// so the loader must stay above 60,000.
func BenchmarkLoaderMNIST(b *testing.B) {
	train := benchMNIST(b)
	for _, workers := range []int{0, 1, 2, 4} {
		b.Run("batch=64/workers="+strconv.Itoa(workers), func(b *testing.B) {
			s, _ := data.NewDistributedSampler(train.Len(), 1, 0, true, 0, false)
			bs, _ := data.NewBatchSampler(s, 64, true)
			l, err := data.NewLoader(train, bs, data.Options{Workers: workers})
			if err != nil {
				b.Fatal(err)
			}
			total, batches := 0, 0
			for b.Loop() {
				for batch, err := range l.Batches(b.Context()) {
					if err != nil {
						b.Fatal(err)
					}
					total += batch.Size()
					batches++
				}
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(batches), "µs/batch")
		})
	}
}

// BenchmarkDistributedSampler measures building one rank's epoch order
// over 60000 samples.
func BenchmarkDistributedSampler(b *testing.B) {
	s, _ := data.NewDistributedSampler(60000, 2, 1, true, 0, false)
	for b.Loop() {
		_ = s.Indices(3)
	}
}
