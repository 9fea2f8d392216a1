package e2e_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/codec"
	"github.com/marketplace/checkout/workflows"
)

// TestCodec_OrderInTemporal_EncryptedAtRest_DecodedForSupportOnly: an order waiting for 3-D Secure
// is read from Temporal by a client without the product's codec, as the server, its database and
// its UI hold it: no payment method token, address or 3-D Secure page anywhere in its history,
// its description or its status query, every payload encrypted with the key named. Support posts
// those payloads to the codec endpoint and reads them; a shopper is refused, and so is a request
// without a token, in the API's error model.
func TestCodec_OrderInTemporal_EncryptedAtRest_DecodedForSupportOnly(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	sh := s.shopper(7801)
	sh.fill(map[int64]int32{71: 1})
	key := "k-" + randomHex(8)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	redirect := r.str("payment", "redirectUrl")
	intent := intentRe.FindStringSubmatch(redirect)[1]
	wf := sh.workflowOf(key)

	plain, err := client.Dial(client.Options{HostPort: s.cfg.TemporalAddress, Namespace: s.cfg.TemporalNamespace,
		Logger: sdklog.NewStructuredLogger(quietLog())})
	require.NoError(t, err)
	defer plain.Close()

	var raw bytes.Buffer
	hist := historyOf(t, s, plain, wf)
	// The hold child is started in the task that answered, and created by the server just after.
	require.Eventually(t, func() bool {
		_, err := plain.DescribeWorkflow(s.ctx, workflows.HoldWorkflowID(r.int("orderId")), "")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the order's hold child runs")
	hold := historyOf(t, s, plain, workflows.HoldWorkflowID(r.int("orderId")))
	for _, m := range []proto.Message{hist, hold} {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		raw.Write(b)
	}
	desc, err := plain.DescribeWorkflow(s.ctx, wf, "")
	require.NoError(t, err)
	b, err := proto.Marshal(desc.RawResponse)
	require.NoError(t, err)
	raw.Write(b)
	status, err := plain.WorkflowService().QueryWorkflow(s.ctx, &workflowservice.QueryWorkflowRequest{
		Namespace: s.cfg.TemporalNamespace, Execution: &commonpb.WorkflowExecution{WorkflowId: wf},
		Query: &querypb.WorkflowQuery{QueryType: workflows.QueryStatus}})
	require.NoError(t, err)
	b, err = proto.Marshal(status)
	require.NoError(t, err)
	raw.Write(b)

	for _, secret := range []string{"tok_3ds", "paymentMethodToken", `"addressId"`, redirect, "/paysim/3ds/", intent,
		`"redirectUrl"`} {
		assert.False(t, bytes.Contains(raw.Bytes(), []byte(secret)), "Temporal holds %q in clear", secret)
	}

	// Every payload of the order's history is encrypted, with the key named.
	input := hist.Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	require.Len(t, input, 1)
	var outcome *commonpb.Payload
	for _, e := range hist.Events {
		if e.EventType == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED {
			outcome = e.GetWorkflowExecutionUpdateCompletedEventAttributes().GetOutcome().GetSuccess().GetPayloads()[0]
		}
	}
	require.NotNil(t, outcome, "the place-order update's answer")
	sealed := []*commonpb.Payload{input[0], outcome, status.GetQueryResult().GetPayloads()[0]}
	for _, p := range sealed {
		assert.Equal(t, codec.EncodingEncrypted, string(p.Metadata["encoding"]))
		assert.Equal(t, s.cfg.CodecKey.ID, string(p.Metadata[codec.MetadataKeyID]))
	}

	// Support reads them through the codec endpoint, as the Temporal UI does.
	body, err := protojson.Marshal(&commonpb.Payloads{Payloads: sealed})
	require.NoError(t, err)
	decode := func(token string) (int, []byte) {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.base+"/codec/decode", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Namespace", s.cfg.TemporalNamespace)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := s.http.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out bytes.Buffer
		_, err = out.ReadFrom(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, out.Bytes()
	}
	code, answer := decode(s.support())
	require.Equal(t, http.StatusOK, code, string(answer))
	var decoded commonpb.Payloads
	require.NoError(t, protojson.Unmarshal(answer, &decoded))
	require.Len(t, decoded.Payloads, 3)
	var in workflows.OrderInput
	require.NoError(t, json.Unmarshal(decoded.Payloads[0].Data, &in))
	assert.Empty(t, in.PaymentMethodToken, "the token stays in PostgreSQL")
	assert.Equal(t, sh.address, in.AddressID)
	assert.Contains(t, string(decoded.Payloads[1].Data), redirect, "the answer the shopper got")
	assert.Contains(t, string(decoded.Payloads[2].Data), `"intentId":"`+intent+`"`, "the status support queries")

	ops, err := auth.Mint([]byte(s.cfg.JWTSecret), auth.Principal{UserID: 950, Role: auth.RoleOps}, time.Hour)
	require.NoError(t, err)
	code, _ = decode(ops)
	assert.Equal(t, http.StatusOK, code, "ops decode too")

	for name, tc := range map[string]struct {
		token  string
		status int
		code   string
	}{
		"shopper":  {sh.token, http.StatusForbidden, "FORBIDDEN"},
		"no token": {"", http.StatusUnauthorized, "UNAUTHORIZED"},
	} {
		code, answer := decode(tc.token)
		assert.Equal(t, tc.status, code, name)
		var e map[string]any
		require.NoError(t, json.Unmarshal(answer, &e), name)
		assert.Equal(t, tc.code, e["code"], name)
		assert.NotEmpty(t, e["message"], name)
		assert.NotContains(t, string(answer), "tok_3ds", name)
	}
	assert.Equal(t, "PENDING_PAYMENT", s.call(http.MethodGet, "/api/v1/orders/"+strconv.FormatInt(r.int("orderId"), 10),
		sh.token, nil, nil).str("status"), "the order itself runs on, encrypted")
}

// historyOf reads a workflow's whole history with the client given.
func historyOf(t *testing.T, s *stack, c client.Client, workflowID string) *historypb.History {
	t.Helper()
	h := &historypb.History{}
	it := c.GetWorkflowHistory(s.ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	return h
}
