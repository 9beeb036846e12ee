// Package dashboard is the live run page: a Hub collects every rank's
// step reports (loss, samples, step time split into compute, exposed
// communication and data wait), heartbeats, restarts and notes (watchdog
// reports), keeps Prometheus metrics of them, and its Handler serves one
// static page (embedded, no CDN: inline SVG charts drawn by inline
// JavaScript), its JSON state (/api/state), the reports of other ranks
// (POST /api/report, see Client) and /metrics (Prometheus text format).
package dashboard
