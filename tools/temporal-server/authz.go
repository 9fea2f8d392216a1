package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

// The names the policy speaks of: the product's (workflows/names.go; a test of the product keeps
// them in step) and the cluster's certificates' common names (internal/pki/pki.go).
const (
	supportAction      = "support-action"
	lineCancelWorkflow = "LineCancelWorkflow"

	cnSystemWorker = "temporal-system-worker"
	cnFrontend     = "temporal-frontend"
	cnInternode    = "temporal-internode"
	cnTools        = "checkout-tools"
	cnWorker       = "checkout-worker"
	cnAPI          = "checkout-api"

	roleSupport = "support"
	roleOps     = "ops"
)

// caller is who a request comes from: a service known by its client certificate, or a person by
// the token the UI forwards (which decides whenever there is one).
type caller struct {
	service string // the certificate's common name
	staff   string // the person's role, from a verified token
	subject string
}

// claimMapper reads the caller from the mutual TLS subject and, when a token is sent, from the
// identity provider's token: signed with a key of its JWKS (RS256 or ES256), not expired, from its
// issuer, for its audience. A token that fails any of these fails the call.
type claimMapper struct {
	keys     authorization.TokenKeyProvider
	issuer   string
	audience string
	now      func() time.Time
}

var _ authorization.ClaimMapper = (*claimMapper)(nil)

func (m *claimMapper) GetClaims(info *authorization.AuthInfo) (*authorization.Claims, error) {
	var c caller
	if info.TLSSubject != nil {
		c.service = info.TLSSubject.CommonName
	}
	if info.AuthToken != "" {
		scheme, token, ok := strings.Cut(info.AuthToken, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, serviceerror.NewPermissionDenied("authorization: want Bearer <token>", "")
		}
		role, sub, err := m.verify(strings.TrimSpace(token))
		if err != nil {
			return nil, serviceerror.NewPermissionDenied("token refused: "+err.Error(), "")
		}
		c.staff, c.subject = role, sub
	}
	subject := c.subject
	if subject == "" {
		subject = c.service
	}
	return &authorization.Claims{Subject: subject, Extensions: c}, nil
}

// verify checks the token and answers its role claim and subject.
func (m *claimMapper) verify(token string) (role, sub string, err error) {
	if m.keys == nil || m.issuer == "" || m.audience == "" {
		return "", "", errors.New("no identity provider configured")
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"RS256", "ES256"}))
	claims := jwt.MapClaims{}
	_, err = parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		switch t.Method.(type) {
		case *jwt.SigningMethodRSA:
			return m.keys.RsaKey(t.Method.Alg(), kid)
		case *jwt.SigningMethodECDSA:
			return m.keys.EcdsaKey(t.Method.Alg(), kid)
		}
		return nil, fmt.Errorf("signing method %s", t.Method.Alg())
	})
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	if m.now != nil {
		now = m.now()
	}
	switch {
	case !claims.VerifyExpiresAt(now.Unix(), true):
		return "", "", errors.New("expired or no exp")
	case !claims.VerifyIssuer(m.issuer, true):
		return "", "", errors.New("another issuer")
	case !claims.VerifyAudience(m.audience, true):
		return "", "", errors.New("another audience")
	}
	sub, _ = claims["sub"].(string)
	role, _ = claims["role"].(string)
	if sub == "" {
		return "", "", errors.New("no sub")
	}
	return role, sub, nil
}

// authorizer is the cluster's policy (docs/runbook.md, "Who may do what in Temporal"):
//   - Temporal's own services and the operators' tools: everything;
//   - the product's worker and API: everything in the checkout namespace, and the cluster's
//     read-only calls, but never a support action, and only the API starts line cancellations
//     (for ops, whom it checked itself);
//   - a person signed in through the identity provider: support reads the checkout namespace and
//     sends support actions (signal or update); ops also start line cancellations;
//   - anyone else (the UI's certificate alone, a shopper's token, another namespace): nothing but
//     the health check.
type authorizer struct {
	namespace string
}

var _ authorization.Authorizer = (*authorizer)(nil)

var allow = authorization.Result{Decision: authorization.DecisionAllow}

func deny(reason string) authorization.Result {
	return authorization.Result{Decision: authorization.DecisionDeny, Reason: reason}
}

func (a *authorizer) Authorize(_ context.Context, claims *authorization.Claims, target *authorization.CallTarget) (authorization.Result, error) {
	if authorization.IsHealthCheckAPI(target.APIName) {
		return allow, nil
	}
	if claims == nil {
		return deny("no client certificate"), nil
	}
	c, _ := claims.Extensions.(caller)
	meta := api.GetMethodMetadata(target.APIName)
	readOnlyCluster := meta.Scope == api.ScopeCluster && meta.Access == api.AccessReadOnly
	inNamespace := meta.Scope == api.ScopeNamespace && target.Namespace == a.namespace
	switch {
	case c.subject != "" || c.staff != "":
		return a.staff(c, meta, readOnlyCluster, inNamespace, target), nil
	case c.service == cnSystemWorker || c.service == cnFrontend || c.service == cnInternode || c.service == cnTools:
		return allow, nil
	case c.service == cnWorker || c.service == cnAPI:
		if readOnlyCluster {
			return allow, nil
		}
		if !inNamespace {
			return deny(c.service + ": the " + a.namespace + " namespace only"), nil
		}
		if name, ok := supportActionIn(target.Request); ok {
			return deny(c.service + " may not send " + name + ": support actions come from a person signed in"), nil
		}
		if starts(target.Request, lineCancelWorkflow) && c.service != cnAPI {
			return deny(c.service + " may not start " + lineCancelWorkflow), nil
		}
		return allow, nil
	}
	return deny("no permission for " + c.service), nil
}

// staff is what a person signed in may do.
func (a *authorizer) staff(c caller, meta api.MethodMetadata, readOnlyCluster, inNamespace bool, target *authorization.CallTarget) authorization.Result {
	if c.staff != roleSupport && c.staff != roleOps {
		return deny("the role " + fmt.Sprintf("%q", c.staff) + " has no access to Temporal")
	}
	if readOnlyCluster {
		return allow
	}
	if !inNamespace {
		return deny("staff: the " + a.namespace + " namespace only")
	}
	if meta.Access == api.AccessReadOnly {
		return allow
	}
	if name, ok := supportActionIn(target.Request); ok && name == supportAction && onlySignalOrUpdate(target.Request) {
		return allow
	}
	if c.staff == roleOps && starts(target.Request, lineCancelWorkflow) && onlyStart(target.Request) {
		return allow
	}
	return deny(c.staff + " may not call " + api.MethodName(target.APIName))
}

// supportActionIn answers the signal or update a request sends, when it is the support action.
func supportActionIn(req any) (string, bool) {
	name := ""
	switch r := req.(type) {
	case *workflowservice.SignalWorkflowExecutionRequest:
		name = r.GetSignalName()
	case *workflowservice.SignalWithStartWorkflowExecutionRequest:
		name = r.GetSignalName()
	case *workflowservice.UpdateWorkflowExecutionRequest:
		name = r.GetRequest().GetInput().GetName()
	case *workflowservice.ExecuteMultiOperationRequest:
		for _, op := range r.GetOperations() {
			if n := op.GetUpdateWorkflow().GetRequest().GetInput().GetName(); n == supportAction {
				return n, true
			}
		}
	}
	return name, name == supportAction
}

// onlySignalOrUpdate: a plain signal or update of a running workflow, starting nothing.
func onlySignalOrUpdate(req any) bool {
	switch req.(type) {
	case *workflowservice.SignalWorkflowExecutionRequest, *workflowservice.UpdateWorkflowExecutionRequest:
		return true
	}
	return false
}

// starts says whether req starts a workflow of type name.
func starts(req any, name string) bool {
	switch r := req.(type) {
	case *workflowservice.StartWorkflowExecutionRequest:
		return r.GetWorkflowType().GetName() == name
	case *workflowservice.SignalWithStartWorkflowExecutionRequest:
		return r.GetWorkflowType().GetName() == name
	case *workflowservice.ExecuteMultiOperationRequest:
		for _, op := range r.GetOperations() {
			if op.GetStartWorkflow().GetWorkflowType().GetName() == name {
				return true
			}
		}
	}
	return false
}

func onlyStart(req any) bool {
	_, ok := req.(*workflowservice.StartWorkflowExecutionRequest)
	return ok
}
