package llm

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/tidwall/gjson"
)

// requestError turns a failed request into *APIError where there was an
// HTTP answer.
func (p *anthropicProvider) requestError(err error, resp *http.Response) error {
	var sdkErr *anthropic.Error
	status, msg := 0, ""
	var header http.Header
	if errors.As(err, &sdkErr) {
		status, msg = sdkErr.StatusCode, sdkErr.Message
		if t := string(sdkErr.Type()); t != "" && msg != "" {
			msg = t + ": " + msg
		}
		if sdkErr.Response != nil {
			header = sdkErr.Response.Header
		}
	}
	if resp != nil && resp.StatusCode >= 400 {
		status, header = resp.StatusCode, resp.Header
		if msg == "" && resp.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			msg = errorMessage(body)
		}
	}
	if status == 0 {
		return redactErr(fmt.Errorf("anthropic: %w", err), p.cfg.APIKey)
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if p.cfg.APIKey != "" {
		msg = strings.ReplaceAll(msg, p.cfg.APIKey, "[redacted]")
	}
	return &APIError{Status: status, Message: msg, RetryAfter: retryAfter(header)}
}

// anthropicErrorStatus maps Anthropic error types to HTTP statuses, for
// errors that arrive inside a stream.
var anthropicErrorStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"billing_error":         402,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"api_error":             500,
	"timeout_error":         504,
	"overloaded_error":      529,
}

// anthropicStreamError maps an `event: error` payload.
func anthropicStreamError(e gjson.Result) error {
	typ := e.Get("type").String()
	msg := e.Get("message").String()
	status, ok := anthropicErrorStatus[typ]
	if !ok {
		status = 500
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if typ != "" {
		msg = typ + ": " + msg
	}
	return &APIError{Status: status, Message: strings.Clone(msg)}
}
