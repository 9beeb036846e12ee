package ddp

import "github.com/cohortml/cohort/internal/dp/reducer"

// Default bucket caps, as in PyTorch: a small first bucket so that the
// first reduction starts early in backward, larger ones after it.
const (
	DefaultFirstBucketCapBytes = reducer.DefaultFirstBucketCapBytes
	DefaultBucketCapBytes      = reducer.DefaultBucketCapBytes
)

// gradElemBytes is the size of one gradient element (float32).
const gradElemBytes = 4

// Plan assigns parameters to gradient buckets and lays the buckets out in
// one flat gradient buffer (the plan every data-parallel wrapper shares;
// see reducer.PlanBuckets for its invariants).
type Plan = reducer.Plan

// BucketPlan is one bucket of a Plan.
type BucketPlan = reducer.BucketPlan
