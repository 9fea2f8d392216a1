package main

// The groups each process's samples are counted in. A Go group is a package (or a runtime
// function) anywhere on the stack; PostgreSQL's are the functions that begin a phase of a
// statement's life.

var goRuntime = []group{
	{"allocation (runtime.mallocgc)", []string{"runtime.mallocgc"}},
	{"garbage collection (mark, assist, sweep)", []string{"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc",
		"runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart"}},
	{"scheduler, idle and network poller", []string{"runtime.schedule", "runtime.findRunnable", "runtime.netpoll",
		"runtime.park_m", "runtime.stopm", "runtime.sysmon"}},
	{"system calls (network, files)", []string{"syscall.Syscall", "syscall.RawSyscall", "internal/runtime/syscall.",
		"syscall.syscall", "runtime.write", "runtime.read", "internal/poll."}},
	{"gRPC", []string{"google.golang.org/grpc"}},
	{"protobuf", []string{"google.golang.org/protobuf", "github.com/gogo/protobuf", "go.temporal.io/api/"}},
}

var checkoutGroups = append([]group{
	{"HTTP server (net/http, Echo)", []string{"net/http.(*conn).serve", "github.com/labstack/echo"}},
	{"PostgreSQL client (pgx)", []string{"github.com/jackc/"}},
	{"Temporal SDK", []string{"go.temporal.io/sdk"}},
	{"JSON", []string{"encoding/json"}},
	{"payload codec (AES-GCM)", []string{"github.com/marketplace/checkout/internal/codec", "crypto/aes",
		"crypto/cipher", "crypto/internal/fips140/aes"}},
	{"JWT and other crypto", []string{"github.com/golang-jwt", "crypto/ecdsa", "crypto/rsa", "crypto/ed25519",
		"crypto/sha256", "crypto/hmac", "crypto/internal/fips140/sha256", "crypto/internal/fips140/hmac"}},
	{"OpenTelemetry", []string{"go.opentelemetry.io"}},
	{"Prometheus metrics", []string{"github.com/prometheus"}},
	{"logging (slog)", []string{"log/slog"}},
	{"NATS client", []string{"github.com/nats-io"}},
	{"the product's own code", []string{"github.com/marketplace/checkout/"}},
}, goRuntime...)

var temporalGroups = append([]group{
	{"SQLite (modernc.org, C translated to Go)", []string{"modernc.org/"}},
	{"persistence layer", []string{"go.temporal.io/server/common/persistence."}},
	{"visibility", []string{"go.temporal.io/server/common/persistence/visibility"}},
	{"history service", []string{"go.temporal.io/server/service/history"}},
	{"matching service", []string{"go.temporal.io/server/service/matching"}},
	{"frontend service", []string{"go.temporal.io/server/service/frontend"}},
	{"server interceptors (auth, metrics, rate limits, telemetry)", []string{"go.temporal.io/server/common/rpc/interceptor"}},
	{"metrics", []string{"go.temporal.io/server/common/metrics", "github.com/prometheus", "go.opentelemetry.io"}},
	{"logging", []string{"go.temporal.io/server/common/log", "go.uber.org/zap"}},
}, goRuntime...)

var postgresGroups = []group{
	{"client protocol: read a message, send the answer", []string{"pq_getbyte", "pq_getmessage", "pq_flush",
		"pq_putmessage", "socket_flush", "secure_read", "secure_write", "ReadCommand"}},
	{"parse, analyse and rewrite", []string{"pg_parse_query", "raw_parser", "parse_analyze", "pg_analyze_and_rewrite"}},
	{"plan (plan cache included)", []string{"pg_plan_queries", "pg_plan_query", "GetCachedPlan", "BuildCachedPlan",
		"RevalidateCachedQuery", "standard_planner", "planner"}},
	{"execute", []string{"standard_ExecutorRun", "ExecutorRun", "ExecutorStart", "standard_ExecutorStart",
		"ExecutorFinish", "ExecutorEnd"}},
	{"triggers (outbox, events, stock)", []string{"ExecCallTriggerFunc", "AfterTriggerFireDeferred",
		"AfterTriggerEndQuery"}},
	{"PL/pgSQL", []string{"plpgsql_exec_function", "plpgsql_exec_trigger", "plpgsql_call_handler"}},
	{"commit (WAL records, flush, locks released)", []string{"CommitTransaction", "CommitTransactionCommand",
		"RecordTransactionCommit", "XLogFlush"}},
	{"begin and the snapshot", []string{"StartTransaction", "StartTransactionCommand", "GetSnapshotData",
		"GetTransactionSnapshot"}},
	{"WAL records written (any phase)", []string{"XLogInsert", "XLogInsertRecord"}},
	{"NOTIFY and LISTEN", []string{"Async_Notify", "PreCommit_Notify", "AtCommit_Notify", "ProcessIncomingNotify",
		"asyncQueue"}},
	{"background: WAL writer, checkpointer, autovacuum, stats", []string{"WalWriterMain", "CheckpointerMain",
		"BackgroundWriterMain", "AutoVacWorkerMain", "AutoVacLauncherMain", "pgstat_report_stat"}},
}

// groupsOf are the groups of a part's samples.
func groupsOf(part string) []group {
	switch part {
	case "checkout":
		return checkoutGroups
	case "temporal":
		return temporalGroups
	case "postgres":
		return postgresGroups
	}
	return goRuntime
}

// prefixOf is the prefix of the functions listed one by one for a part: the product's for the
// checkout, the server's for Temporal, every function for PostgreSQL.
func prefixOf(part string) string {
	switch part {
	case "checkout":
		return "github.com/marketplace/checkout/"
	case "temporal":
		return "go.temporal.io/server/"
	case "postgres":
		return anyFunction
	}
	return ""
}

// The prefixes whose innermost frame on a stack names the call a sample was under.
const (
	productCode   = "github.com/marketplace/checkout/"
	apiCode       = "github.com/marketplace/checkout/api."
	activityCode  = "github.com/marketplace/checkout/activities."
	temporalCode  = "go.temporal.io/server/service/"
	temporalStore = "go.temporal.io/server/common/persistence/"
)

// innerOf are the prefixes whose innermost frame is counted for a part.
func innerOf(part string) []string {
	switch part {
	case "checkout":
		return []string{productCode, apiCode, activityCode}
	case "temporal":
		return []string{temporalCode, temporalStore}
	}
	return nil
}
