package workflows_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/internal/metrics"
	"github.com/marketplace/checkout/internal/telemetry"
	"github.com/marketplace/checkout/workflows"
)

const historyDir = "testdata/histories"

// keptHistory is one line of the manifest: a recorded history and the release that recorded it.
type keptHistory struct {
	file, sha256, release string
}

// manifest reads testdata/histories/MANIFEST: "# release <name>: …" headings, then one
// "<sha256>  <file>" line per history recorded by that release; "# retired <name>: <date> …"
// headings, added once a release's code is gone, mark its histories retired.
func manifest(t *testing.T) []keptHistory {
	t.Helper()
	kept, _ := readManifest(t)
	return kept
}

// readManifest is manifest with the retired releases and the date each was retired on.
func readManifest(t *testing.T) ([]keptHistory, map[string]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(historyDir, "MANIFEST"))
	require.NoError(t, err)
	defer f.Close()
	var out []keptHistory
	retired := map[string]string{}
	release := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case strings.HasPrefix(line, "# release "):
			release, _, _ = strings.Cut(strings.TrimPrefix(line, "# release "), ":")
		case strings.HasPrefix(line, "# retired "):
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "# retired "), ": ")
			date, _, _ := strings.Cut(rest, " ")
			_, derr := time.Parse(time.DateOnly, date)
			require.True(t, ok && derr == nil, "manifest line %q is not `# retired <release>: <YYYY-MM-DD> …`", line)
			require.NotContains(t, retired, name, "%s is retired twice", name)
			retired[name] = date
		case strings.HasPrefix(line, "#"):
		default:
			sum, file, ok := strings.Cut(line, "  ")
			require.True(t, ok, "manifest line %q is not `<sha256>  <file>`", line)
			require.NotEmpty(t, release, "manifest line %q comes before any release heading", line)
			out = append(out, keptHistory{file: file, sha256: sum, release: release})
		}
	}
	require.NoError(t, sc.Err())
	for name := range retired {
		require.True(t, slices.ContainsFunc(out, func(h keptHistory) bool { return h.release == name }),
			"retired release %s recorded no histories", name)
	}
	return out, retired
}

// TestHistories_RetiredBuildsAreTheManifests: the builds the code names as retired
// (workflows.RetiredBuilds, which the worker's start-up check reads) are those the manifest marks
// retired, and the current build is not one of them.
func TestHistories_RetiredBuildsAreTheManifests(t *testing.T) {
	_, retired := readManifest(t)
	assert.ElementsMatch(t, slices.Collect(maps.Keys(retired)), workflows.RetiredBuilds)
	assert.NotContains(t, workflows.RetiredBuilds, workflows.BuildID)
}

// TestHistories_KeptUnchanged: every history a release recorded stays as it was recorded. A
// history that no longer replays means running orders would be stranded; changing or deleting
// the file would only hide that.
func TestHistories_KeptUnchanged(t *testing.T) {
	kept := manifest(t)
	listed := map[string]bool{}
	for _, h := range kept {
		require.False(t, listed[h.file], "%s is listed twice", h.file)
		listed[h.file] = true
		raw, err := os.ReadFile(filepath.Join(historyDir, h.file))
		require.NoError(t, err, "%s (release %s) was deleted: recorded histories are kept", h.file, h.release)
		sum := sha256.Sum256(raw)
		require.Equal(t, h.sha256, hex.EncodeToString(sum[:]),
			"%s (release %s) was changed: record a new file instead", h.file, h.release)
	}
	err := filepath.WalkDir(historyDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
			return err
		}
		rel, _ := filepath.Rel(historyDir, path)
		require.True(t, listed[rel], "%s is not in the manifest (make histories adds new files to it)", rel)
		return nil
	})
	require.NoError(t, err)
}

// everyPath names the histories each build records (make histories): every path the saga and the
// line cancellation have.
var everyPath = []string{"confirmed-at-once", "confirmed-3ds", "confirmed-3ds-hold", "declined-at-once", "declined-3ds",
	"hold-expired", "hold-expired-hold", "out-of-stock", "price-changed", "cancelled", "payment-unknown",
	"payment-unknown-hold", "seller-shortfall", "support-retry", "support-cancel", "support-refund", "parked-resumed",
	"late-webhook-reversal", "refused-open-order-cap", "hold-extended", "hold-extended-hold",
	"coupon-confirmed", "coupon-used-up",
	"line-cancel-damaged", "line-cancel-repeated", "line-cancel-seller-cannot-ship", "line-cancel-refund-refused",
	"worker-settings",
	"payment-unknown-cancelled", "try-again-placed", "parked-given-up", "support-without-actor-then-cancel"}

// TestHistories_CurrentBuildHasEveryPath: a build of the workflow code is released with a history
// of every path, so the next change is checked against all of them.
func TestHistories_CurrentBuildHasEveryPath(t *testing.T) {
	have := map[string]bool{}
	for _, h := range manifest(t) {
		if h.release == workflows.BuildID {
			have[strings.TrimSuffix(filepath.Base(h.file), ".json")] = true
		}
	}
	for _, name := range everyPath {
		assert.True(t, have[name], "%s/%s.json is not recorded: make histories", workflows.BuildID, name)
	}
}

// TestHistories_CurrentBuildCarriesNoPaymentTokenOrCoordinates: the histories of this build's
// every path hold no payment method token and no shipping coordinates in any payload (inputs,
// results, markers, signals, updates): the workflow carries references (the order, the address)
// and its steps read the rest from PostgreSQL.
func TestHistories_CurrentBuildCarriesNoPaymentTokenOrCoordinates(t *testing.T) {
	checked := 0
	for _, h := range manifest(t) {
		if h.release != workflows.BuildID {
			continue
		}
		f, err := os.Open(filepath.Join(historyDir, h.file))
		require.NoError(t, err)
		hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
		require.NoError(t, errors.Join(err, f.Close()))
		for _, data := range payloadsOf(hist.ProtoReflect()) {
			checked++
			for _, banned := range []string{"tok_", `"token"`, `"paymentMethodToken"`, `"shipTo"`, `"lat"`, `"lon"`} {
				assert.NotContains(t, string(data), banned, "%s: a payload carries %s", h.file, banned)
			}
		}
	}
	require.NotZero(t, checked, "no payloads found in build %s's histories", workflows.BuildID)
}

// payloadsOf collects the data of every Payload message inside m, however deeply nested.
func payloadsOf(m protoreflect.Message) [][]byte {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		return [][]byte{p.GetData()}
	}
	var out [][]byte
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() != protoreflect.MessageKind:
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					out = append(out, payloadsOf(mv.Message())...)
					return true
				})
			}
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				out = append(out, payloadsOf(v.List().Get(i).Message())...)
			}
		default:
			out = append(out, payloadsOf(v.Message())...)
		}
		return true
	})
	return out
}

// TestReplay_RecordedHistories replays every kept history against the current code: a change that
// is not deterministic for orders already running fails here. Kept histories are decoded (the
// product encrypts its payloads; the recorder decodes them), so they replay with the SDK's
// default converter and need no key. A history whose run was pinned to
// another build (worker versioning) never reaches this code: the test shows that it was pinned,
// every task of it on that build, instead of replaying it. The histories of a retired release
// (unversioned: its runs were carried by the first versioned builds until none was open) are kept
// but not replayed: its code is gone.
//
// A history pinned to an earlier build is also replayed on this code, for the report: "movable"
// when it replays (a run of that build waiting at that point could move here with `checkout
// builds move`), or the first line of why not. The report, per build and path, is logged at the
// end; it decides nothing.
func TestReplay_RecordedHistories(t *testing.T) {
	kept, retired := readManifest(t)
	require.NotEmpty(t, kept, "no recorded histories: run make histories")
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	movable := map[string][]string{} // build → "path: movable" or "path: why not"
	defer func() { logMovable(t, movable) }()
	for _, h := range kept {
		t.Run(h.release+"/"+h.file, func(t *testing.T) {
			if date, ok := retired[h.release]; ok {
				t.Logf("retired on %s: not replayed, kept", date)
				return
			}
			f, err := os.Open(filepath.Join(historyDir, h.file))
			require.NoError(t, err)
			hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			require.NoError(t, errors.Join(err, f.Close()))
			encrypted, err := codec.Encrypted(context.Background(), hist)
			require.NoError(t, err)
			require.False(t, encrypted, "its payloads are encrypted: histories are kept decoded, since no key is kept "+
				"with them (make histories decodes them as it records)")
			if build, pinned := pinnedBuild(hist); pinned && build != workflows.BuildID {
				path := strings.TrimSuffix(filepath.Base(h.file), ".json")
				verdict := "movable"
				if err := replayer().ReplayWorkflowHistory(quietLogger, hist); err != nil {
					verdict = "stays: " + firstLine(err)
				}
				movable[build] = append(movable[build], path+": "+verdict)
				t.Logf("kept away by worker versioning: every task ran pinned to build %s (this is %s); on this code: %s",
					build, workflows.BuildID, verdict)
				return
			}
			require.NoError(t, replayer().ReplayWorkflowHistory(logger, hist))
		})
	}
}

// replayer replays on this build's workflows, with the interceptors a worker runs them with:
// Temporal's OpenTelemetry tracing interceptor (which the worker takes from its client), over a
// tracer that records every span, and the product's worker interceptor, which names the order in
// log lines and headers and measures histories. Neither may add a command: a history recorded
// with tracing off replays with it on, and the other way round.
func replayer() worker.WorkflowReplayer {
	tracer, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:              sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())).Tracer("go.temporal.io/sdk"),
		TextMapPropagator:   telemetry.Propagator,
		DisableQueryTracing: true,
	})
	if err != nil {
		panic(err)
	}
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
		Interceptors: []interceptor.WorkerInterceptor{tracer, telemetry.WorkerInterceptor(telemetry.WorkerOptions{
			Metrics: metrics.New(), OrderIDAttr: workflows.AttrOrderID,
			OrderIDPrefixes: []string{strings.TrimSuffix(workflows.HoldWorkflowID(0), "0")}})},
	})
	if err != nil {
		panic(err)
	}
	r.RegisterWorkflow(workflows.OrderWorkflow)
	r.RegisterWorkflow(workflows.HoldWorkflow)
	r.RegisterWorkflowWithOptions(workflows.LineCancelWorkflow,
		workflow.RegisterOptions{Name: workflows.LineCancelWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.PaymentReconcilerWorkflow,
		workflow.RegisterOptions{Name: workflows.PaymentReconcilerWorkflowName})
	return r
}

// quietLogger keeps the replayer's warnings about a history that does not replay out of the
// output: the verdict is what the report needs.
var quietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))

// logMovable logs, per earlier build, which of its kept paths would move to this build.
func logMovable(t *testing.T, movable map[string][]string) {
	for _, build := range slices.Sorted(maps.Keys(movable)) {
		paths := movable[build]
		n := 0
		for _, p := range paths {
			if strings.HasSuffix(p, ": movable") {
				n++
			}
		}
		t.Logf("runs of build %s that would move to %s (checkout builds move): %d of %d kept paths\n  %s",
			build, workflows.BuildID, n, len(paths), strings.Join(paths, "\n  "))
	}
}

// firstLine is the first line of why a history does not replay, without the marker's payloads.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	s, _, _ = strings.Cut(s, ", markerData")
	return s
}

// pinnedBuild says whether every workflow task of a history was completed pinned, by one build.
func pinnedBuild(h *historypb.History) (string, bool) {
	build, tasks := "", 0
	for _, e := range h.Events {
		a := e.GetWorkflowTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		tasks++
		b := a.GetDeploymentVersion().GetBuildId()
		if a.GetVersioningBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED || b == "" || (build != "" && b != build) {
			return "", false
		}
		build = b
	}
	return build, tasks > 0
}
