package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/rollgate/rollgate/strategy/verdict"
)

// maxWebBody caps a web provider's response.
const maxWebBody = 1 << 20

// WebProvider GETs a JSON document and picks a number with a JSON path in
// kubectl's syntax, such as {.data.successRate}.
type WebProvider struct{}

// Measure GETs q.Web.URL and returns the value at q.Web.JSONPath: one
// number (JSON number or numeric string) as a scalar, several (an array,
// or a path that matches many) as a list. Anything else is an error.
func (p *WebProvider) Measure(ctx context.Context, q Query) (Value, error) {
	w := q.Web
	if w == nil {
		return Value{}, ErrNoProvider
	}
	jp, err := verdict.ParseJSONPath(w.JSONPath)
	if err != nil {
		return Value{}, fmt.Errorf("jsonPath: %w", err)
	}
	timeout := timeoutOf(w.Timeout)
	headers := headerMap(w.Headers)
	if _, set := headers["Accept"]; !set {
		headers["Accept"] = "application/json"
	}
	client, err := newClient(clientOptions{target: w.URL, secret: q.Secret, headers: headers, timeout: timeout, maxBody: maxWebBody})
	if err != nil {
		return Value{}, err
	}
	defer client.CloseIdleConnections()
	body, err := get(ctx, client, w.URL)
	if err != nil {
		return Value{}, redact(err, q.Secret)
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return Value{}, fmt.Errorf("GET %s: response is not JSON: %w", w.URL, err)
	}
	results, err := jp.FindResults(doc)
	if err != nil {
		return Value{}, fmt.Errorf("jsonPath %s: %w", w.JSONPath, err)
	}
	var nums []float64
	for _, set := range results {
		for _, rv := range set {
			got, err := numbers(rv.Interface())
			if err != nil {
				return Value{}, fmt.Errorf("jsonPath %s: %w", w.JSONPath, err)
			}
			nums = append(nums, got...)
		}
	}
	if len(results) == 1 && len(results[0]) == 1 && len(nums) == 1 && !isList(results[0][0].Interface()) {
		return verdict.Scalar(nums[0]), nil
	}
	return verdict.List(nums), nil
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading response: %w", url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, snippet(body))
	}
	return body, nil
}

// snippet is the start of a response body, for error messages.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

func isList(v any) bool {
	_, ok := v.([]any)
	return ok
}

// numbers converts a picked JSON value: a number, a numeric string, or an
// array of those.
func numbers(v any) ([]float64, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return []float64{f}, err
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return nil, fmt.Errorf("value %q is not a number", x)
		}
		return []float64{f}, nil
	case []any:
		var out []float64
		for _, e := range x {
			if isList(e) {
				return nil, fmt.Errorf("nested arrays are not supported")
			}
			f, err := numbers(e)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	case nil:
		return nil, fmt.Errorf("value is null")
	default:
		return nil, fmt.Errorf("value of type %s is not a number", reflect.TypeOf(v).Kind())
	}
}
