package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/marketplace/checkout/internal/dev/benchkit"
	"github.com/marketplace/checkout/internal/dev/pgserver"
)

// reserveOrdersTxn calls reserve_orders as the engine does for a combined batch of :batch
// one-unit orders of the hot SKU, shipped to Istanbul, order ids from the sequence.
const reserveOrdersTxn = `SELECT count(*) FROM reserve_orders(
  ARRAY(SELECT nextval('bench_order_seq') FROM generate_series(1, (:batch)::int)),
  array_fill(41.01::float8, ARRAY[(:batch)::int]), array_fill(28.97::float8, ARRAY[(:batch)::int]),
  array_fill(900::float8, ARRAY[(:batch)::int]), ARRAY(SELECT g::int FROM generate_series(1, (:batch)::int) g),
  array_fill(:sku::bigint, ARRAY[(:batch)::int]), array_fill(1, ARRAY[(:batch)::int]));
`

// reserveOrderTxn calls reserve_order as the engine does with combining off: one order of one
// unit of a spread SKU (:sku), shipped to Istanbul, its id from the sequence.
const reserveOrderTxn = `SELECT count(*) FROM reserve_order(nextval('bench_order_seq'), ARRAY[(:sku)::bigint], ARRAY[1],
  41.01::float8, 28.97::float8, 900::float8);
`

// profileSide is one side of the statement profile: its pgbench script and name.
type profileSide struct {
	name, script string
}

// statementTime is one statement's execution time per transaction of its side, in one round.
type statementTime struct {
	query string
	ms    float64
}

// profile is `make bench-reserve-profile`: where the time of one combined batch goes inside
// PostgreSQL, statement by statement (nested ones included, from pg_stat_statements with track =
// all), beside pgbench's batched baseline of the same size on the same cluster. Both run on one
// connection, one transaction after another, so no lock wait is in the figures: what is left is
// each statement's own work. A batch of 1 profiles instead one order with combining off
// (reserve_order on a random one of the spread SKUs) beside pgbench's one-order transaction on
// the same SKUs. It prints a table; it writes no file.
func profile(ctx context.Context, seconds, rounds, batch int) error {
	bindir, err := pgserver.BinDir()
	if err != nil {
		return err
	}
	pgbench, err := pgbenchPath(bindir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "checkout-bench-profile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf("starting a private PostgreSQL cluster (durable settings, pg_stat_statements) in %s", tmp)
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := pgserver.Start(startCtx, pgserver.Options{Dir: filepath.Join(tmp, "data"), Settings: map[string]string{
		"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}})
	cancel()
	if err != nil {
		return err
	}
	defer srv.Stop()
	const db = "profile"
	skus := 1
	sides := []profileSide{
		{"reserve_orders", scriptVars(1, batch) + reserveOrdersTxn},
		{"pgbench batched", script(1, batch)},
	}
	if batch == 1 {
		skus = spreadSKUs
		sides = []profileSide{
			{"reserve_order", scriptVars(spreadSKUs, 1) + reserveOrderTxn},
			{"pgbench", script(spreadSKUs, 1)},
		}
	}
	conn, err := pgbenchDatabase(ctx, srv, db, skus)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		return fmt.Errorf("prepare the profile database: %w", err)
	}
	files := make([]string, len(sides))
	for k, side := range sides {
		files[k] = filepath.Join(tmp, fmt.Sprintf("profile_%d.sql", k))
		if err := os.WriteFile(files[k], []byte(side.script), 0o644); err != nil {
			return err
		}
	}
	// times[side][round] are the round's statements; tps[side] its rounds' rates.
	times := make([][][]statementTime, len(sides))
	tps := make([][]float64, len(sides))
	for round := range rounds {
		for i := range sides {
			// The sides take turns running first, as in the main benchmark.
			k := (i + round) % len(sides)
			side := sides[k]
			if _, err := conn.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
				return err
			}
			logf("round %d, %s: pgbench -n -M prepared -c 1 -j 1 -T %d", round+1, side.name, seconds)
			out, _, err := command(ctx, "", nil, pgbench, "-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port), "-U", pgserver.Superuser,
				"-n", "-M", "prepared", "-c", "1", "-j", "1", "-T", strconv.Itoa(seconds), "-f", files[k], db)
			if err != nil {
				return fmt.Errorf("pgbench: %w", err)
			}
			rate, err := match(out, tpsExpr)
			if err != nil {
				return err
			}
			txns, err := match(out, txnsExpr)
			if err != nil {
				return err
			}
			stmts, err := statementTimes(ctx, conn, db, txns)
			if err != nil {
				return err
			}
			times[k] = append(times[k], stmts)
			tps[k] = append(tps[k], rate)
		}
	}
	fmt.Print(profileTable(sides, times, tps, batch, rounds, seconds))
	return nil
}

// statementTimes reads the profile database's statements (top-level and nested) with their
// execution time per transaction of the run, largest first; statements run less than once a
// transaction (the reset, the server's own) are left out.
func statementTimes(ctx context.Context, conn *pgx.Conn, db string, txns float64) ([]statementTime, error) {
	rows, err := conn.Query(ctx, `SELECT s.query, s.total_exec_time, s.calls FROM pg_stat_statements s
		JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1 ORDER BY s.total_exec_time DESC`, db)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	var out []statementTime
	for rows.Next() {
		var query string
		var total float64
		var calls int64
		if err := rows.Scan(&query, &total, &calls); err != nil {
			return nil, err
		}
		if float64(calls) < txns || strings.Contains(query, "pg_stat_statements") {
			continue
		}
		out = append(out, statementTime{query: shortQuery(query), ms: total / txns})
	}
	return out, rows.Err()
}

var spaces = regexp.MustCompile(`\s+`)

// shortQuery names a statement by its first words, on one line.
func shortQuery(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if len(q) > 70 {
		q = q[:70] + "…"
	}
	return strings.ReplaceAll(q, "|", `\|`)
}

// profileTable renders each side's statements with the median over the rounds of their time per
// transaction, and the sides' transaction rates.
func profileTable(sides []profileSide, times [][][]statementTime, tps [][]float64, batch, rounds, seconds int) string {
	var b strings.Builder
	what, unit := fmt.Sprintf("one batch of %d one-unit orders of the hot SKU", batch), "batch"
	if batch == 1 {
		what, unit = fmt.Sprintf("one one-unit order of one of %d spread SKUs, combining off", spreadSKUs), "order"
	}
	fmt.Fprintf(&b, "Statement profile of %s, one connection, "+
		"`pgbench -c 1 -T %d` per side, %d rounds (medians); time per transaction in ms, nested statements inside the "+
		"top-level one's time:\n\n", what, seconds, rounds)
	fmt.Fprintf(&b, "| side | statement | ms per %s |\n|---|---|---:|\n", unit)
	for k, side := range sides {
		var order []string
		per := map[string][]float64{}
		for _, round := range times[k] {
			for _, s := range round {
				if _, ok := per[s.query]; !ok {
					order = append(order, s.query)
				}
				per[s.query] = append(per[s.query], s.ms)
			}
		}
		for _, q := range order {
			fmt.Fprintf(&b, "| %s | `%s` | %.3f |\n", side.name, q, benchkit.SpreadOf(per[q]).Median)
		}
	}
	fmt.Fprintf(&b, "\n| side | %s/s: median (lowest–highest) | orders/s |\n|---|---:|---:|\n", map[string]string{"batch": "batches", "order": "orders"}[unit])
	for k, side := range sides {
		s := benchkit.SpreadOf(tps[k])
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %.0f |\n", side.name, s.Median, s.Lo, s.Hi, s.Median*float64(batch))
	}
	return b.String()
}
