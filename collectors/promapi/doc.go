// Package promapi reads the workers' metrics from a Prometheus (or Thanos
// Query, Mimir: the same /api/v1/query) instead of scraping each worker:
// the config's metrics_source. Large pools already run a Prometheus that
// scrapes every pod; kvtop asks it, over one kept connection, with a
// couple of queries per refresh whatever the number of workers (see
// docs/PROTOCOLS.md §11 for the PromQL).
//
// Each refresh:
//
//  1. The targets query: per worker (the value of WorkerLabel, pod by
//     default, on the series the selector matches), whether Prometheus can
//     scrape it (max of up) and when it last did (max of timestamp(up), on
//     Prometheus' clock). Two small series per worker.
//  2. For the workers scraped since the last refresh only, named by value a
//     chunk of 256 at a time: every series kvtop reads (the families of
//     package metrics) with each target's scrape time, from one
//     evaluation. A worker's data is fetched once per Prometheus scrape:
//     in steady state a refresh reads 1/15 of the pool with a 15 s scrape
//     interval.
//
// Each worker's series are rebuilt into the page its engine served (the
// target labels Prometheus added removed, families under TYPE lines) and
// read by metrics.Parser: dialect detection, DP engines, invalid values,
// SGLang's token sources are the direct scrape's, field for field (the
// end-to-end test holds them equal against a real Prometheus).
//
// Windows: option (a) of issue 13. The observation is the same
// MetricsScrape with cumulative counters and histograms, stamped with the
// time of Prometheus' scrape, and the pool windows it like its own
// scrapes: counter resets, process restarts (process_start_time_seconds),
// coverage, and the bucket deltas of the latency quantiles are one code
// path, whatever the source (DESIGN.md: the pool knows a source only as
// the label it shows). Server-side increase()/rate()/histogram_quantile()
// (option b) would have needed a second path in the pool at every level
// (engine, worker, pool) and lost what it needs besides rates: a pool
// quantile from summed bucket deltas (never an average of quantiles), and
// the counters restart detection reads. It would also make Prometheus
// evaluate range functions over every series each second; raw instant
// reads of only the new scrapes are the cheapest queries there are. The
// price is honesty about resolution: a window rests on Prometheus' samples,
// so the scrape interval seen is carried (MetricsScrape.Interval) and
// shown ("via prometheus, 15 s scrape", and the data's age: Prometheus'
// scrape time to now), a window shorter than two scrapes is said on
// screen, and coverage comes from the sample times themselves. Only the
// first window after kvtop starts is shorter than with server-side rates.
//
// Clocks: a worker's scrape time is placed on kvtop's clock as the
// answer's arrival minus its age measured on Prometheus' clock
// (evaluation time minus sample time); the two clocks are never compared.
//
// Failures are SourceErrors in the collector kinds: a rejected query
// (bad_data: usually the selector) is config with Prometheus' words, a
// server-side timeout timeout, other statuses http_status, an answer that
// is not the API's parse, a redirect is not followed (the bearer token
// goes only to the configured URL), an answer over BodyLimit too_large,
// warnings (a partial Thanos or Mimir answer) partial, once a minute. A
// worker with up = 0 is down ("Prometheus cannot scrape it"); one whose up
// series vanished is down, "absent in Prometheus", as is a configured
// worker Prometheus has never seen. When Prometheus stops answering, its
// workers are shown down after two failed refreshes and staleAfter.
//
// Decoding: the queries go through client_golang's api client (and its
// v1 error types, so failures read the same), but the answers are read by
// answer.go in one pass into reused slices with interned strings: v1's
// decoder costs about 35 µs a sample (a label map per sample through
// encoding/json), 3.5 s of CPU to read 1 000 vLLM workers and 29 ms for
// the targets query alone (docs/PERFORMANCE.md).
//
// One goroutine runs the refreshes; there is no goroutine per worker.
// Thanos and Mimir answer the same API but were not run in the tests.
package promapi
