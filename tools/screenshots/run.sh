#!/usr/bin/env bash
# make screenshots: runs a private `checkout-dev dev` (its own data folder and ports, so a developer's
# `make run` is left alone), lets shoot.mjs make orders and photograph the Temporal UI and Jaeger into
# docs/screenshots/, then stops the stack and removes its data, also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Ports below the kernel's ephemeral range (32768+), where the tests' servers pick theirs, and
# apart from make run's (55432, 7233, 8233, 8080, 9091).
export PG_PORT=15432 TEMPORAL_PORT=17233 TEMPORAL_UI_PORT=18233 JAEGER_UI_PORT=18686 JAEGER_OTLP_PORT=14318
export NATS_PORT=14222 NATS_MONITOR_PORT=18222
export HTTP_ADDR=127.0.0.1:18080 PUBLIC_BASE_URL=http://127.0.0.1:18080 METRICS_ADDR=127.0.0.1:19091
export STEP_RETRY_WINDOW=3s # a failing step parks its order in seconds, not minutes
export LOG_LEVEL=warn

for port in "$PG_PORT" "$TEMPORAL_PORT" "$TEMPORAL_UI_PORT" "$JAEGER_UI_PORT" "$JAEGER_OTLP_PORT" "$NATS_PORT" "$NATS_MONITOR_PORT" 18080 19091; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port $port is taken (another make screenshots?); stop that first" >&2
		exit 1
	fi
done

DATA_DIR=$(mktemp -d -t checkout-screenshots.XXXXXX)
export DATA_DIR
pid=
cleanup() {
	status=$?
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" # Ctrl-C: stops API, worker, Temporal and PostgreSQL in order
		wait "$pid" || true
	fi
	if [ "$status" != 0 ] && [ -f "$DATA_DIR/dev.log" ]; then
		echo "--- last lines of the stack's log ---" >&2
		tail -n 30 "$DATA_DIR/dev.log" >&2
	fi
	rm -rf "$DATA_DIR"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bin/checkout-dev dev >"$DATA_DIR/dev.log" 2>&1 &
pid=$!

echo "waiting for the private stack on $PUBLIC_BASE_URL (data in $DATA_DIR)"
for _ in $(seq 240); do
	curl -sf "$PUBLIC_BASE_URL/readyz" >/dev/null && break
	kill -0 "$pid" 2>/dev/null || { echo "checkout-dev dev exited while starting" >&2; exit 1; }
	sleep 0.5
done
curl -sf "$PUBLIC_BASE_URL/readyz" >/dev/null || { echo "checkout-dev dev not ready after 2 minutes" >&2; exit 1; }

mkdir -p docs/screenshots
API_URL=$PUBLIC_BASE_URL UI_URL=http://127.0.0.1:$TEMPORAL_UI_PORT JAEGER_URL=http://127.0.0.1:$JAEGER_UI_PORT OUT_DIR=docs/screenshots \
	node tools/screenshots/shoot.mjs
