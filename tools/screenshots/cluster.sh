#!/usr/bin/env bash
# make screenshots-signin: runs a private `checkout-dev cluster` (one API replica, one worker; its own
# data folder, kept binaries and ports, so a developer's `make cluster` is left alone), lets
# signin.mjs sign staff and a shopper in to its Temporal UI through the cluster's identity provider
# and photograph it into docs/screenshots/, then stops the cluster and removes its folder, also
# when a step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

# 79 consecutive ports (cluster.PortsSpan) from PORTS_FROM: below the kernel's ephemeral range and
# the tests' clusters (20000 on), apart from make cluster's and make screenshots' ports.
PORTS_FROM=${PORTS_FROM:-16000}

DATA_DIR=$(mktemp -d -t checkout-signin.XXXXXX)
export DATA_DIR
pid= shots=
cleanup() {
	status=$?
	if [ -n "$shots" ] && kill -0 "$shots" 2>/dev/null; then
		kill "$shots"
		wait "$shots" || true
	fi
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" # Ctrl-C: the cluster stops every process it started, then PostgreSQL
		wait "$pid" || true
	fi
	if [ "$status" != 0 ] && [ -f "$DATA_DIR/cluster.out" ]; then
		if ! grep -q 'checkout cluster is running' "$DATA_DIR/cluster.out"; then
			echo "--- last lines of checkout cluster's output ---" >&2
			tail -n 30 "$DATA_DIR/cluster.out" >&2
		fi
		# Who signed in or was refused, and what the API said.
		for log in oidc-provider api-1; do
			if [ -f "$DATA_DIR/cluster/logs/$log.log" ]; then
				echo "--- last lines of $log.log ---" >&2
				tail -n 5 "$DATA_DIR/cluster/logs/$log.log" >&2
			fi
		done
	fi
	rm -rf "$DATA_DIR"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster takes its secrets from its own folder; settings of the shell that name another stack
# are left out.
unset DATABASE_URL TEMPORAL_ADDRESS PUBLIC_BASE_URL PAYMENT_PROVIDER
# A step whose provider is down parks its order in seconds, not minutes.
STEP_RETRY_WINDOW=3s LOG_LEVEL=warn bin/checkout-dev cluster --ports-from "$PORTS_FROM" --dir "$DATA_DIR/cluster" \
	--builds "$DATA_DIR/builds" --apis 1 --workers 1 --history-shards 4 >"$DATA_DIR/cluster.out" 2>&1 &
pid=$!

echo "waiting for the private cluster on ports $PORTS_FROM… (data in $DATA_DIR)"
for _ in $(seq 600); do
	grep -q 'checkout cluster is running' "$DATA_DIR/cluster.out" && break
	kill -0 "$pid" 2>/dev/null || { echo "checkout cluster exited while starting" >&2; exit 1; }
	sleep 0.5
done
grep -q 'checkout cluster is running' "$DATA_DIR/cluster.out" || { echo "checkout cluster not running after 5 minutes" >&2; exit 1; }

# Where the cluster says its API and UI are (the host name the provider and the UI were set up
# with: localhost).
API_URL=$(sed -n 's/^  API (HAProxy) *\(http[^ ]*\).*/\1/p' "$DATA_DIR/cluster.out")
UI_URL=$(sed -n 's/^  Temporal UI *\(http[^ ]*\).*/\1/p' "$DATA_DIR/cluster.out")
[ -n "$API_URL" ] && [ -n "$UI_URL" ] || { echo "the cluster's banner names no API or UI address" >&2; exit 1; }

mkdir -p docs/screenshots
# Shoppers' tokens come from the cluster's provider through bin/checkout-dev token with the
# cluster's settings; the staff's from the provider too, signed in through the UI in the browser. In the background, so that
# a signal stops it and the cluster at once.
(
	set -a
	# shellcheck disable=SC1091
	. "$DATA_DIR/cluster/checkout.env"
	set +a
	API_URL=$API_URL UI_URL=$UI_URL OIDC_SECRETS=$DATA_DIR/cluster/oidc/secrets.json OUT_DIR=docs/screenshots \
		CLUSTER_CA=$DATA_DIR/cluster/tls/ca.pem \
		exec node tools/screenshots/signin.mjs
) &
shots=$!
wait "$shots"
