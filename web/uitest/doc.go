// Package uitest holds the browser tests of the web UI: each starts a real
// server over a DuckDB store in a temporary directory, feeds it with agent
// batches (loadgen's generator, storetest's generator, or the real agent
// sampling a simulated Hadoop job), and drives Debian's headless Chromium
// with chromedp. Screenshots of every page go to $TASKSCOPE_ARTIFACTS
// (default testdata-out/screenshots at the top of the repository).
package uitest
