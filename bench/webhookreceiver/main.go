// Command webhookreceiver is a seller's webhook endpoint for trying the checkout on this machine:
// it checks each delivery's signature by the Standard Webhooks convention (with the library a
// seller's own code would use), prints the event, and answers 204 — or 401 for a bad signature.
//
//	go -C bench run ./webhookreceiver -secret whsec_... -addr 127.0.0.1:9009
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func main() {
	secret := flag.String("secret", os.Getenv("WEBHOOK_SECRET"), "the endpoint's secret (whsec_…), as registering it answered")
	addr := flag.String("addr", "127.0.0.1:9009", "where to listen (this machine only)")
	flag.Parse()
	log.SetFlags(0)
	wh, err := standardwebhooks.NewWebhook(*secret)
	if err != nil || *secret == "" {
		log.Fatalf("-secret: the whsec_… secret the checkout answered when the endpoint was registered (%v)", err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil {
			log.Printf("REFUSED %s: %v", r.Header.Get("webhook-id"), err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var out bytes.Buffer
		if json.Compact(&out, body) != nil {
			out.Write(body)
		}
		fmt.Printf("signed ok  webhook-id %s\n%s\n", r.Header.Get("webhook-id"), out.String())
		w.WriteHeader(http.StatusNoContent)
	})
	log.Printf("listening on http://%s/ (Ctrl-C stops)", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
