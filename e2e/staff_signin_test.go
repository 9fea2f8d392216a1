package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/marketplace/checkout/internal/auth"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/dev/cluster"
	"github.com/marketplace/checkout/internal/dev/testenv"
	"github.com/marketplace/checkout/workflows"
)

// signInToUI signs name in to the cluster's Temporal UI through the identity provider, as a
// browser does (cluster.SignIn): the access token the UI forwards, or the status of the
// provider's refusal.
func (c *runningCluster) signInToUI(t *testing.T, name, password string) (string, int) {
	t.Helper()
	token, err := cluster.SignIn(context.Background(), fmt.Sprintf("http://localhost:%d", c.ports.UI), name, password)
	var refused cluster.SignInRefused
	if errors.As(err, &refused) {
		return "", refused.Status
	}
	require.NoError(t, err)
	return token, http.StatusOK
}

// claimsOf reads a JWT's claims (already verified by whoever gave it).
func claimsOf(t *testing.T, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(raw, &claims))
	return claims
}

// uiCall sends a request to the Temporal UI's API as the UI's page does, with the person's token.
func (c *runningCluster) uiCall(t *testing.T, method, path, token string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://localhost:%d%s", c.ports.UI, path), bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// staffSignInThroughTheProvider: support signs in to the UI through the cluster's identity
// provider and, with the token the UI forwards, encodes a support action at the codec endpoint
// (which names her as its actor) and sends it through the UI: the authorizer lets it through and
// the worker cancels the order. The shopper signs in too but gets nothing: the UI's frontend and
// the codec refuse her. The API refuses an ops token of the shared secret and takes the provider's.
func (c *runningCluster) staffSignInThroughTheProvider(t *testing.T, s *stack) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, cluster.OIDCDir, "secrets.json"))
	require.NoError(t, err)
	var secrets cluster.OIDCSecrets
	require.NoError(t, json.Unmarshal(raw, &secrets))

	_, status := c.signInToUI(t, "alice", "not-her-password")
	assert.Equal(t, http.StatusUnauthorized, status, "a wrong password is refused at the provider")
	alice, _ := c.signInToUI(t, "alice", secrets.Passwords["alice"])
	claims := claimsOf(t, alice)
	assert.Equal(t, "support", claims["role"])
	assert.Equal(t, "901", claims["sub"])
	sam, _ := c.signInToUI(t, "sam", secrets.Passwords["sam"])
	assert.Equal(t, "shopper", claimsOf(t, sam)["role"], "the shopper signs in, with no staff role")

	// An order waiting for its 3-D Secure payment, which support may cancel.
	sh := s.shopper(clusterShopper(7004))
	sh.fill(map[int64]int32{71: 1})
	key := "cluster-staff-" + randomHex(4)
	r := sh.order(key, sh.preview(), "tok_3ds")
	require.Equal(t, http.StatusCreated, r.status, r.raw)
	wf := workflows.OrderWorkflowID(sh.id, key)

	// The support action, encoded by the codec endpoint with the token the UI passes it.
	plain, err := converter.GetDefaultDataConverter().ToPayload(workflows.SupportRequest{Action: workflows.ActionCancel,
		Reason: "customer asked by phone"})
	require.NoError(t, err)
	in, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{plain}})
	require.NoError(t, err)
	encode := func(token string) reply {
		return s.call(http.MethodPost, "/codec/encode", token, []string{"X-Namespace", "default"}, json.RawMessage(in))
	}
	shopperEncode := encode(sam)
	assert.Equal(t, http.StatusForbidden, shopperEncode.status, "the codec refuses the provider's shopper: %s", shopperEncode.raw)
	hs256, err := config.Config{JWTSecret: s.cfg.JWTSecret, JWTMaxLifetime: time.Hour}.AuthKeys().
		Mint(auth.Principal{UserID: 950, Role: auth.RoleOps}, time.Hour)
	require.NoError(t, err)
	forged := encode(hs256)
	assert.Equal(t, http.StatusUnauthorized, forged.status, "an ops token of the shared secret is refused outside dev: %s", forged.raw)
	encoded := encode(alice)
	require.Equal(t, http.StatusOK, encoded.status, encoded.raw)

	update := fmt.Appendf(nil, `{"workflowExecution":{"workflowId":%q},"request":{"meta":{"updateId":"staff-%s"},
		"input":{"name":%q,"args":%s}},"waitPolicy":{"lifecycleStage":"UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED"}}`,
		wf, randomHex(4), workflows.SupportAction, encoded.raw)
	path := fmt.Sprintf("/api/v1/namespaces/default/workflows/%s/update/%s", url.PathEscape(wf), workflows.SupportAction)
	code, answer := c.uiCall(t, http.MethodGet, "/api/v1/namespaces/default/workflows", "", nil)
	assert.Equal(t, http.StatusUnauthorized, code, "the UI forwards nothing without a person's token: %s", answer)
	code, answer = c.uiCall(t, http.MethodPost, path, sam, update)
	assert.Equal(t, http.StatusForbidden, code, "the authorizer refuses the shopper: %s", answer)
	code, answer = c.uiCall(t, http.MethodGet, "/api/v1/namespaces/default/workflows", sam, nil)
	assert.Equal(t, http.StatusForbidden, code, "the shopper reads nothing either: %s", answer)
	code, answer = c.uiCall(t, http.MethodPost, path, alice, update)
	require.Equal(t, http.StatusOK, code, "support's action passes the authorizer: %s", answer)
	final := s.waitFinal(sh.token, r.int("orderId"), time.Minute)
	assert.Equal(t, "CANCELLED", final.str("status"), "the worker obeys it: %s", final.raw)

	// The UI's Start Workflow: only ops may start a line cancellation. oscar's start passes the
	// authorizer and meets the ended order's id (REJECT_DUPLICATE), so nothing runs; alice's is
	// refused before that.
	oscar, _ := c.signInToUI(t, "oscar", secrets.Passwords["oscar"])
	start := fmt.Appendf(nil, `{"workflowId":%q,"workflowType":{"name":%q},"taskQueue":{"name":"checkout"},
		"requestId":"start-%s","workflowIdReusePolicy":"WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE"}`,
		wf, workflows.LineCancelWorkflowName, randomHex(4))
	startPath := "/api/v1/namespaces/default/workflows/" + url.PathEscape(wf)
	code, answer = c.uiCall(t, http.MethodPost, startPath, alice, start)
	assert.Equal(t, http.StatusForbidden, code, "support may not start a line cancellation: %s", answer)
	code, answer = c.uiCall(t, http.MethodPost, startPath, oscar, start)
	assert.Equal(t, http.StatusConflict, code, "ops may (the id is taken): %s", answer)

	// What the worker read names alice from her token, not from the input.
	pki := cluster.Options{Dir: c.dir}.PKI()
	tlsCfg, err := pki.ClientTLS(cluster.IdentityTools)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tc, err := client.DialContext(ctx, client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", c.ports.Frontend),
		Namespace: "default", ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg}})
	require.NoError(t, err)
	defer tc.Close()
	sealed, err := config.ClusterSecretsOf(c.dir)
	require.NoError(t, err)
	pc, err := testenv.Config(t, map[string]string{"TEMPORAL_CODEC_KEY": sealed.CodecKey,
		"TEMPORAL_CODEC_KID": sealed.CodecKeyID}).PayloadCodec()
	require.NoError(t, err)
	var actor map[string]any
	it := tc.GetWorkflowHistory(ctx, wf, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		accepted := e.GetWorkflowExecutionUpdateAcceptedEventAttributes()
		if accepted.GetAcceptedRequest().GetInput().GetName() != workflows.SupportAction {
			continue
		}
		decoded, err := pc.Decode(accepted.GetAcceptedRequest().GetInput().GetArgs().GetPayloads())
		require.NoError(t, err)
		var got struct{ Actor map[string]any }
		require.NoError(t, json.Unmarshal(decoded[0].Data, &got))
		actor = got.Actor
	}
	require.NotNil(t, actor, "the accepted support action carries its actor")
	assert.Equal(t, "901", actor["sub"])
	assert.Equal(t, "Alice Support", actor["name"])
	assert.Equal(t, "support", actor["role"])
}
