// Command claimfirst shows claim-first writes: a PostgreSQL row that refuses a
// stale lock holder.
//
// A lease can lapse while its holder is stalled (a GC pause, swapping, a slow
// disk), and the next holder then gets a larger fence. The row remembers the
// largest fence that claimed it, so a holder that wakes up late with a smaller
// one changes nothing:
//
//  1. claim: UPDATE t SET fence = $f WHERE id = $id AND fence < $f RETURNING value
//  2. write: UPDATE t SET value = ... WHERE id = $id AND fence = $f
//     (0 rows: a newer holder claimed the row; you are stale, redo with a new lease)
//
// The claim commits on its own, before the work, so a newer holder is visible
// to a stale one however long the work takes.
//
// Run it against a broker and a database:
//
//	LOCKBROKER_URL=http://127.0.0.1:7700 \
//	DATABASE_URL='host=127.0.0.1 user=postgres dbname=test sslmode=disable' go run .
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/lib/pq"

	"lockbroker.dev/lockbroker"
)

// ErrStaleFence means a newer lease has claimed the row: this holder must not write.
var ErrStaleFence = errors.New("the row was claimed by a newer fence")

// CreateTable makes a table of counters, each row with the last fence that claimed it.
func CreateTable(ctx context.Context, db *sql.DB, table string) error {
	_, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+pq.QuoteIdentifier(table)+
		" (id bigint PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, value bigint NOT NULL DEFAULT 0)")
	return err
}

// Claim is step 1: it records fence on the row if it is the largest yet, and
// returns the row's value. A newer (or the same) fence got there first:
// ErrStaleFence.
func Claim(ctx context.Context, db *sql.DB, table string, id, fence int64) (int64, error) {
	var value int64
	err := db.QueryRowContext(ctx, "UPDATE "+pq.QuoteIdentifier(table)+
		" SET fence = $1 WHERE id = $2 AND fence < $1 RETURNING value", fence, id).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("row %d, fence %d: %w", id, fence, ErrStaleFence)
	}
	return value, err
}

// Write is step 2: it writes value only while the row still carries fence.
func Write(ctx context.Context, db *sql.DB, table string, id, fence, value int64) error {
	result, err := db.ExecContext(ctx, "UPDATE "+pq.QuoteIdentifier(table)+
		" SET value = $1 WHERE id = $2 AND fence = $3", value, id, fence)
	if err != nil {
		return err
	}
	if rows, err := result.RowsAffected(); err != nil {
		return err
	} else if rows == 0 {
		return fmt.Errorf("row %d, fence %d: %w", id, fence, ErrStaleFence)
	}
	return nil
}

// UpdateRow claims the row with the lease's fence, computes the new value from
// the old one, and writes it. It returns the value written.
func UpdateRow(db *sql.DB, table string, id int64, lease *lockbroker.Lease, compute func(int64) int64) (int64, error) {
	// The lease's context stops the work once the lease is lost; the fence
	// check in Write is the real guard.
	ctx := lease.Context()
	current, err := Claim(ctx, db, table, id, lease.Fence)
	if err != nil {
		return 0, err
	}
	value := compute(current)
	if err := Write(ctx, db, table, id, lease.Fence, value); err != nil {
		return 0, err
	}
	return value, nil
}

// run adds one to the counter in row 1 of table under the lock "<table>:1".
func run(ctx context.Context, client *lockbroker.Client, dsn, table string, out io.Writer) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := CreateTable(ctx, db, table); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+pq.QuoteIdentifier(table)+
		" (id) VALUES (1) ON CONFLICT DO NOTHING"); err != nil {
		return err
	}
	lease, err := client.Lock(ctx, table+":1", lockbroker.LockOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		return err
	}
	value, err := UpdateRow(db, table, 1, lease, func(v int64) int64 { return v + 1 })
	if releaseErr := lease.Release(ctx); err == nil {
		err = releaseErr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fence %d: counter is now %d\n", lease.Fence, value)
	return nil
}

func main() {
	client, err := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "host=127.0.0.1 user=postgres dbname=test sslmode=disable"
	}
	table := os.Getenv("CLAIM_FIRST_TABLE")
	if table == "" {
		table = "claim_first_demo"
	}
	if err := run(context.Background(), client, dsn, table, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
