// Package storetest is the conformance suite every store.Store
// implementation must pass: blocking Get woken by Set, Wait on many keys,
// atomic Add and CompareAndSwap under concurrency, Delete, context
// cancellation and Close unblocking waiters.
//
// It is imported only from _test.go files:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Opener {
//			s := memstore.New()
//			t.Cleanup(func() { s.Close() })
//			return func(t *testing.T) store.Store { return s }
//		})
//	}
package storetest
