package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// maxHookBody caps a hook's answer.
const maxHookBody = 64 << 10

// HookAnswer is what one call of a hook answered.
type HookAnswer struct {
	// Yes is the verdict of the hook's successCondition (or a 2xx status).
	Yes bool
	// Message is the status code and the start of the body, or the error;
	// it never holds credentials.
	Message string
}

// maxHookMessage bounds HookAnswer.Message (HookStatus.message holds 512).
const maxHookMessage = 500

// JobAnswer is the answer of a Job hook whose Job ended (JobProvider.Run:
// yes and the note), or that could not ask (yes false, why), bounded as a
// call's.
func JobAnswer(yes bool, note string) HookAnswer {
	return HookAnswer{Yes: yes, Message: cut(note, maxHookMessage)}
}

// CallHook POSTs payload (JSON) to url, the hook's URL with its
// placeholders expanded, with the hook's headers and the credentials and
// TLS settings of secret, and judges the answer with cond. Redirects are
// followed within url's origin only. A call that fails (no answer, a
// timeout) is a no.
func CallHook(ctx context.Context, h *v1alpha1.Hook, url string, secret SecretData, payload []byte, cond verdict.HookCondition) HookAnswer {
	a := callHook(ctx, h, url, secret, payload, cond)
	a.Message = cut(a.Message, maxHookMessage)
	return a
}

func callHook(ctx context.Context, h *v1alpha1.Hook, url string, secret SecretData, payload []byte, cond verdict.HookCondition) HookAnswer {
	headers := headerMap(h.Headers)
	if _, set := headers["Accept"]; !set {
		headers["Accept"] = "application/json"
	}
	client, err := newClient(clientOptions{target: url, secret: secret, headers: headers, timeout: timeoutOf(h.Timeout), maxBody: maxHookBody})
	if err != nil {
		return HookAnswer{Message: redact(err, secret).Error()}
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return HookAnswer{Message: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return HookAnswer{Message: redact(err, secret).Error()}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return HookAnswer{Message: fmt.Sprintf("HTTP %d, reading the answer: %v", resp.StatusCode, redact(err, secret))}
	}
	var body any = string(raw)
	var doc any
	if json.Unmarshal(raw, &doc) == nil {
		body = doc
	}
	yes, err := cond.Yes(resp.StatusCode, body)
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if text := strings.TrimSpace(string(raw)); text != "" {
		msg += ": " + cut(text, 200)
	}
	if err != nil {
		return HookAnswer{Message: msg + " (successCondition: " + err.Error() + ")"}
	}
	return HookAnswer{Yes: yes, Message: msg}
}

// cut is s cut to n bytes on a rune boundary, marked with "...".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
