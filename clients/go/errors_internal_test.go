package lockbroker

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every error code of the contract gets its own type, never the bare
// BrokerError, and every type unwraps to BrokerError.
func TestEveryErrorCodeInTheContractHasAType(t *testing.T) {
	spec, err := os.ReadFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	enum := regexp.MustCompile(`(?s)code:\s+type: string\s+enum:\s+((?:-\s+\w+\s+)+)`).FindSubmatch(spec)
	if enum == nil {
		t.Fatal("no error code enum in openapi.yaml")
	}
	codes := strings.Fields(strings.ReplaceAll(string(enum[1]), "-", " "))
	if len(codes) < 10 {
		t.Fatalf("only %d codes found: %v", len(codes), codes)
	}
	for _, code := range codes {
		if _, ok := kinds[code]; !ok {
			t.Errorf("code %q has no error type", code)
			continue
		}
		err := errorFromAnswer(400, &errorBody{Code: code, Message: "m"}, "3")
		if _, bare := err.(*BrokerError); bare {
			t.Errorf("code %q maps to the bare BrokerError", code)
		}
		var common *BrokerError
		if !errors.As(err, &common) || common.Code != code || common.RetryAfter.Seconds() != 3 {
			t.Errorf("code %q: %#v does not unwrap to its BrokerError", code, err)
		}
	}
}

func TestAnAnswerWithoutACodeIsTypedByStatus(t *testing.T) {
	var down *Unavailable
	if err := errorFromAnswer(502, nil, ""); !errors.As(err, &down) || down.Code != "http_502" {
		t.Fatalf("502: %v", err)
	}
	var busy *LockBusy
	if err := errorFromAnswer(423, nil, ""); !errors.As(err, &busy) {
		t.Fatalf("423: %v", err)
	}
	if err := errorFromAnswer(418, nil, ""); errors.As(err, &down) {
		t.Fatalf("418 typed as unavailable: %v", err)
	}
	if errors.Is(errorFromAnswer(409, nil, ""), ErrLeaseLost) {
		t.Fatal("a 409 without a code was taken for lease_lost")
	}
}

func TestWireMillisRoundsAndNeverSendsZero(t *testing.T) {
	for d, want := range map[int64]int64{0: 1, 400_000: 1, 1_499_999: 1, 1_500_000: 2, 30_000_000_000: 30000} {
		if got := wireMillis(durationOf(d)); got != want {
			t.Errorf("wireMillis(%dns) = %d, want %d", d, got, want)
		}
	}
}

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
