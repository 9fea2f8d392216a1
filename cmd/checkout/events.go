package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/marketplace/checkout/events"
	"github.com/marketplace/checkout/internal/config"
	"github.com/marketplace/checkout/internal/wiring"
)

const eventsUsage = `checkout events: the checkout's events on the broker (NATS_URL; default make run's)

  events tail [--all] [--type order.] [--validate]
      print each event (a CloudEvents envelope, one JSON line) as it is published; --all starts
      from the first one the stream keeps; --type keeps the types that start with it; --validate
      checks each against docs/events.md's schemas and says so beside it
`

func runEvents(ctx context.Context, cfg config.Config, args []string) error {
	if len(args) == 0 || args[0] != "tail" {
		fmt.Fprint(os.Stderr, eventsUsage)
		return errors.New("events: tail is the one subcommand")
	}
	fs := flag.NewFlagSet("events tail", flag.ContinueOnError)
	all := fs.Bool("all", false, "from the first event the stream keeps (default: new ones only)")
	typ := fs.String("type", "", "only event types that start with this (order., stock.changed, …)")
	validate := fs.Bool("validate", false, "check every event against its schema")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if cfg.Events.NATSURL == "" {
		cfg.Events.NATSURL = "nats://127.0.0.1:" + strconv.Itoa(cfg.Dev.NATSPort)
	}
	b, err := events.Connect(wiring.Events(cfg, "checkout-events-tail"))
	if err != nil {
		return err
	}
	defer b.Close()
	var v *events.Validator
	if *validate {
		if v, err = events.NewValidator(); err != nil {
			return err
		}
	}
	policy := jetstream.DeliverNewPolicy
	if *all {
		policy = jetstream.DeliverAllPolicy
	}
	cons, err := b.JetStream().OrderedConsumer(ctx, events.StreamName(cfg.Events.Prefix),
		jetstream.OrderedConsumerConfig{DeliverPolicy: policy})
	if err != nil {
		return fmt.Errorf("stream %s at %s: %w", events.StreamName(cfg.Events.Prefix), cfg.Events.NATSURL, err)
	}
	fmt.Fprintf(os.Stderr, "tailing %s at %s (Ctrl-C stops)\n", events.StreamName(cfg.Events.Prefix), cfg.Events.NATSURL)
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		e, err := events.Decode(m.Data())
		if err != nil || !strings.HasPrefix(e.Type, *typ) {
			continue
		}
		var line bytes.Buffer
		if err := json.Compact(&line, m.Data()); err != nil {
			continue
		}
		if v != nil {
			verdict := "valid"
			if err := v.Validate(m.Data()); err != nil {
				verdict = "INVALID: " + err.Error()
			}
			fmt.Fprintf(os.Stderr, "%s %s: %s\n", e.Type, e.ID, verdict)
		}
		fmt.Println(line.String())
	}
}
