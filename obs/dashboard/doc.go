// Package dashboard is the live run page: a Hub collects every rank's
// step reports (loss, samples, step time split into compute, exposed
// communication and data wait), heartbeats, restarts and notes (watchdog
// reports), keeps Prometheus metrics of them, and its Handler serves one
// static page (embedded, no CDN: inline SVG charts drawn by inline
// JavaScript), its JSON state (/api/state), the reports of other ranks
// (POST /api/report, see Client) and /metrics (Prometheus text format).
//
// A diverging run stays visible: numbers are Float, which JSON carries
// as a number or as "NaN", "+Inf", "-Inf", and the page shows them as
// such. The hub is safe to expose to its network: a POST needs the
// job's token (NewHub), is at most 1 MiB and 1,000 reports, and only
// ranks 1..world−1 may report (others are refused with 400). What it
// keeps is bounded by the world: one row and seven metric series per
// rank, 2,000 curve points (halved when full) and 20 notes of at most
// 1,000 bytes.
package dashboard
