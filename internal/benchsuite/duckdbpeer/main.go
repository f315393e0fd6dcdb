// Command duckdbpeer is the bench's DuckDB peer for extract on Parquet: on
// one thread, it writes the JSON Lines extract writes for an
// Infinity-Instruct shaped file (id, and the first human turn as the user
// message) to stdout, straight from read_parquet.
//
// It is a module of its own (it needs cgo and DuckDB's prebuilt library),
// built only by the bench's extract section.
package main

import (
	"database/sql"
	"fmt"
	"os"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2"
)

const query = `COPY (
	SELECT id, [{'role': 'user', 'content': list_filter(conversations, t -> t."from" = 'human')[1].value}] AS messages
	FROM read_parquet('%s')
) TO '/dev/stdout' (FORMAT JSON)`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: duckdbpeer FILE.parquet")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "duckdbpeer:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // SET applies to the connection
	if _, err := db.Exec("SET threads=1"); err != nil {
		return err
	}
	_, err = db.Exec(fmt.Sprintf(query, strings.ReplaceAll(path, "'", "''")))
	return err
}
