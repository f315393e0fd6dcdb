// Package pipelines holds tokenmill's bash pipelines, the scripts users run
// and copy: generate.sh (extract | dedup | infer, then stats), demo.sh (the
// whole job on a simulated fleet), sharded.sh (one shard per host with GNU
// parallel), slurm-array.sbatch (one shard per Slurm array task),
// rerun-missing.sh (answer what a run left unanswered), and the servers
// kept up by serve on several machines: serve-node.sh (one node's serve),
// slurm-serve.sbatch (one per node of a Slurm job) and serve-hosts.sh (one
// per host, with GNU parallel). Each documents its
// usage and variables at its top. The package's tests run every script for
// real against llmsim fleets, GNU parallel and a private Slurm cluster.
package pipelines
