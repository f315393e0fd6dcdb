package stats

import "tokenmill/lib/jsonl"

// batchRecords is what a batch holds at the most: an interrupted run
// reports whole batches.
const batchRecords = jsonl.BatchRecords
