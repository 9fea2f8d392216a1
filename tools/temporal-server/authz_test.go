package main

import (
	"context"
	"crypto/x509/pkix"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

// TestAuthorizer_EachCallerItsPart: the policy, call by call: services by certificate, staff by
// their verified role, nobody else anything.
func TestAuthorizer_EachCallerItsPart(t *testing.T) {
	const ns = "checkout"
	a := &authorizer{namespace: ns}
	service := func(cn string) *authorization.Claims { return &authorization.Claims{Extensions: caller{service: cn}} }
	staff := func(role string) *authorization.Claims {
		return &authorization.Claims{Extensions: caller{service: "temporal-ui", staff: role, subject: "900"}}
	}
	signal := func(name string) *workflowservice.SignalWorkflowExecutionRequest {
		return &workflowservice.SignalWorkflowExecutionRequest{Namespace: ns, SignalName: name}
	}
	update := &workflowservice.UpdateWorkflowExecutionRequest{Namespace: ns,
		Request: &updatepb.Request{Input: &updatepb.Input{Name: supportAction}}}
	start := func(typ string) *workflowservice.StartWorkflowExecutionRequest {
		return &workflowservice.StartWorkflowExecutionRequest{Namespace: ns, WorkflowType: &commonpb.WorkflowType{Name: typ}}
	}
	call := func(method string, req any) *authorization.CallTarget {
		return &authorization.CallTarget{APIName: api.WorkflowServicePrefix + method, Namespace: ns, Request: req}
	}
	list := call("ListWorkflowExecutions", &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns})
	for _, tc := range []struct {
		name   string
		claims *authorization.Claims
		target *authorization.CallTarget
		allow  bool
	}{
		{"nobody lists", nil, list, false},
		{"the health check is open", nil, &authorization.CallTarget{APIName: "/grpc.health.v1.Health/Check"}, true},
		{"the UI's certificate alone lists nothing", service("temporal-ui"), list, false},
		{"a certificate of no known kind", service("someone"), list, false},
		{"the worker polls", service(cnWorker), call("PollWorkflowTaskQueue", &workflowservice.PollWorkflowTaskQueueRequest{Namespace: ns}), true},
		{"the worker signals a shortfall", service(cnWorker), call("SignalWorkflowExecution", signal("shortfall")), true},
		{"the worker may not send a support action", service(cnWorker), call("SignalWorkflowExecution", signal(supportAction)), false},
		{"nor the API, by update", service(cnAPI), call("UpdateWorkflowExecution", update), false},
		{"the worker starts no line cancellation", service(cnWorker), call("StartWorkflowExecution", start(lineCancelWorkflow)), false},
		{"the API starts one for ops", service(cnAPI), call("StartWorkflowExecution", start(lineCancelWorkflow)), true},
		{"the worker stays in its namespace", service(cnWorker), &authorization.CallTarget{APIName: api.WorkflowServicePrefix + "ListWorkflowExecutions", Namespace: "other"}, false},
		{"the tools administer", service(cnTools), call("RegisterNamespace", &workflowservice.RegisterNamespaceRequest{Namespace: ns}), true},
		{"Temporal's own worker", service(cnSystemWorker), call("StartWorkflowExecution", start("temporal-sys-scheduler-workflow")), true},
		{"support lists", staff(roleSupport), list, true},
		{"support signals a support action", staff(roleSupport), call("SignalWorkflowExecution", signal(supportAction)), true},
		{"support updates with one", staff(roleSupport), call("UpdateWorkflowExecution", update), true},
		{"support sends no other signal", staff(roleSupport), call("SignalWorkflowExecution", signal("payment-event")), false},
		{"support terminates nothing", staff(roleSupport), call("TerminateWorkflowExecution", &workflowservice.TerminateWorkflowExecutionRequest{Namespace: ns}), false},
		{"support starts no line cancellation", staff(roleSupport), call("StartWorkflowExecution", start(lineCancelWorkflow)), false},
		{"ops starts one", staff(roleOps), call("StartWorkflowExecution", start(lineCancelWorkflow)), true},
		{"ops starts no order", staff(roleOps), call("StartWorkflowExecution", start("OrderWorkflow")), false},
		{"a shopper's token, through the UI, gets nothing", staff("shopper"), list, false},
		{"staff stay in the namespace", staff(roleOps), &authorization.CallTarget{APIName: api.WorkflowServicePrefix + "ListWorkflowExecutions", Namespace: "other"}, false},
	} {
		got, err := a.Authorize(context.Background(), tc.claims, tc.target)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (got.Decision == authorization.DecisionAllow) != tc.allow {
			t.Errorf("%s: decision %v (%s), want allow=%v", tc.name, got.Decision, got.Reason, tc.allow)
		}
	}
}

// TestClaimMapper_CertificateWithoutTokenIsTheService_BadTokenRefused: a client known only by its
// certificate is that service; a token that cannot be verified fails the call, whoever sends it.
func TestClaimMapper_CertificateWithoutTokenIsTheService_BadTokenRefused(t *testing.T) {
	m := &claimMapper{issuer: "http://idp", audience: "temporal-ui"}
	c, err := m.GetClaims(&authorization.AuthInfo{TLSSubject: &pkix.Name{CommonName: cnWorker}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Extensions.(caller); got.service != cnWorker || got.staff != "" {
		t.Errorf("caller %+v", got)
	}
	if _, err := m.GetClaims(&authorization.AuthInfo{TLSSubject: &pkix.Name{CommonName: cnWorker}, AuthToken: "Bearer not.a.token"}); err == nil {
		t.Error("an unverifiable token is refused")
	}
}
