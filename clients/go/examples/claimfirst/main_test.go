package main

// The claim-first example against a real broker and PostgreSQL: a stalled
// holder whose lease lapsed cannot overwrite the work of the holder after it.
//
// PostgreSQL comes from LOCKBROKER_TEST_PG_DSN, or 127.0.0.1:5432 with trust
// auth, user postgres, database test; the tests skip when it is unreachable.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"lockbroker.dev/lockbroker"
	"lockbroker.dev/lockbroker/lockbrokertest"
)

var (
	brokerURL string
	bg        = context.Background()
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		redis, err := lockbrokertest.StartRedis()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer redis.Stop()
		broker, err := lockbrokertest.StartBroker(redis, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer broker.Stop()
		brokerURL = broker.URL
		return m.Run()
	}())
}

func dsn() string {
	if value := os.Getenv("LOCKBROKER_TEST_PG_DSN"); value != "" {
		return value
	}
	return "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable connect_timeout=3"
}

// setup gives a client, a database and a counters table of the test's own
// with row 1 at value 0, dropped after.
func setup(t *testing.T) (*lockbroker.Client, *sql.DB, string) {
	t.Helper()
	db, err := sql.Open("postgres", dsn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(bg); err != nil {
		t.Skipf("PostgreSQL is unreachable (%s): %v", dsn(), err)
	}
	table := fmt.Sprintf("claim_first_go_%d", time.Now().UnixNano())
	if err := CreateTable(bg, db, table); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO " + pq.QuoteIdentifier(table) + " (id) VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + pq.QuoteIdentifier(table)) })
	client, err := lockbroker.NewClient(brokerURL, lockbroker.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return client, db, table
}

func row(t *testing.T, db *sql.DB, table string) (fence, value int64) {
	t.Helper()
	if err := db.QueryRow("SELECT fence, value FROM "+pq.QuoteIdentifier(table)+" WHERE id = 1").Scan(&fence, &value); err != nil {
		t.Fatal(err)
	}
	return fence, value
}

func TestAHolderWhoseLeaseLapsedCannotWriteAfterTheNextHolderClaimed(t *testing.T) {
	client, db, table := setup(t)
	stalled, err := client.Acquire(bg, table, lockbroker.AcquireOptions{TTL: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if value, err := Claim(bg, db, table, 1, stalled.Fence); err != nil || value != 0 {
		t.Fatalf("the first claim: %d, %v", value, err)
	}
	time.Sleep(600 * time.Millisecond) // the stall outlives the lease

	current, err := client.Lock(bg, table, lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if current.Fence <= stalled.Fence {
		t.Fatalf("fence %d after %d", current.Fence, stalled.Fence)
	}
	if value, err := UpdateRow(db, table, 1, current, func(v int64) int64 { return v + 1 }); err != nil || value != 1 {
		t.Fatalf("the current holder's update: %d, %v", value, err)
	}
	if err := current.Release(bg); err != nil {
		t.Fatal(err)
	}

	if err := Write(bg, db, table, 1, stalled.Fence, 100); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("the stale write: %v", err)
	}
	if _, err := Claim(bg, db, table, 1, stalled.Fence); !errors.Is(err, ErrStaleFence) {
		t.Fatalf("the stale claim: %v", err)
	}
	if fence, value := row(t, db, table); fence != current.Fence || value != 1 {
		t.Fatalf("row (%d, %d), want (%d, 1)", fence, value, current.Fence)
	}
}

func TestEachNewLeaseClaimsAndWritesInTurn(t *testing.T) {
	client, db, table := setup(t)
	for want := int64(1); want <= 3; want++ {
		lease, err := client.Lock(bg, table, lockbroker.LockOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		value, err := UpdateRow(db, table, 1, lease, func(v int64) int64 { return v + 1 })
		if err != nil || value != want {
			t.Fatalf("update %d: %d, %v", want, value, err)
		}
		if err := lease.Release(bg); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTheProgramCountsUpUnderTheLock(t *testing.T) {
	client, _, table := setup(t)
	for want := 1; want <= 2; want++ {
		var out bytes.Buffer
		if err := run(bg, client, dsn(), table, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), fmt.Sprintf("counter is now %d", want)) {
			t.Fatalf("run %d printed %q", want, out.String())
		}
	}
}
