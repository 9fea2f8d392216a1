package main

import (
	"strings"
	"testing"
)

const script = `checkout 4242
	    55d1a0 github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage+0x4d (/work/bin/checkout-dev)
	    55d0f0 github.com/marketplace/checkout/inventory/internal/stockstore.(*Queries).ReserveOrder+0x80 (/work/bin/checkout-dev)
	    55d000 github.com/marketplace/checkout/activities.(*Inventory).Reserve-fm+0x20 (/work/bin/checkout-dev)
	    55c000 runtime.goexit.abi0+0x1 (/work/bin/checkout-dev)

postgres 77
	ffffffff81000000 entry_SYSCALL_64+0x10 ([kernel.kallsyms])
	    7f0000 __GI_fdatasync+0x1b (/usr/lib/x86_64-linux-gnu/libc.so.6)
	    5f0000 XLogFlush+0x120 (/usr/lib/postgresql/15/bin/postgres)
	    5e0000 CommitTransactionCommand+0x30 (/usr/lib/postgresql/15/bin/postgres)

other thing 9
	    10 [unknown] ([unknown])
`

func TestParseScript_SamplesWithTheirFramesLeafFirst(t *testing.T) {
	var got []sample
	if err := parseScript(strings.NewReader(script), func(s sample) { got = append(got, s) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	if got[0].comm != "checkout" || got[0].pid != 4242 || len(got[0].frames) != 4 ||
		got[0].frames[0] != "github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage" {
		t.Fatalf("first sample %+v", got[0])
	}
	if got[1].frames[0] != kernelMark+"entry_SYSCALL_64" || got[1].frames[2] != "XLogFlush" {
		t.Fatalf("kernel frame not marked, or offsets kept: %q", got[1].frames)
	}
	if got[2].comm != "other thing" || got[2].pid != 9 {
		t.Fatalf("a command with a space: %+v", got[2])
	}
}

func TestTally_InclusiveGroupsAndTheInnermostCall(t *testing.T) {
	var samples []sample
	_ = parseScript(strings.NewReader(script), func(s sample) { samples = append(samples, s) })
	c := newTally()
	c.add(samples[0], groupsOf("checkout"), prefixOf("checkout"), innerOf("checkout"))
	if c.groups["PostgreSQL client (pgx)"] != 1 || c.groups["the product's own code"] != 1 || c.groups["JSON"] != 0 {
		t.Fatalf("groups %v", c.groups)
	}
	if c.inner[productCode][productCode+"inventory/internal/stockstore.(*Queries).ReserveOrder"] != 1 {
		t.Fatalf("innermost product call %v", c.inner[productCode])
	}
	if c.inner[activityCode][activityCode+"(*Inventory).Reserve"] != 1 {
		t.Fatalf("innermost activity, -fm trimmed: %v", c.inner[activityCode])
	}
	if goEntry(samples[0].frames) != activityCode+"(*Inventory).Reserve-fm" {
		t.Fatalf("entry %q", goEntry(samples[0].frames))
	}
	p := newTally()
	p.add(samples[1], groupsOf("postgres"), prefixOf("postgres"), innerOf("postgres"))
	if p.kernel != 1 || p.groups["commit (WAL records, flush, locks released)"] != 1 || p.funcs["XLogFlush"] != 1 ||
		p.funcs[kernelMark+"entry_SYSCALL_64"] != 0 {
		t.Fatalf("postgres tally %+v", p)
	}
}
