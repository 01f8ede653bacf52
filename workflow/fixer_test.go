package workflow

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestOpenAIFixerDoesNotFollowRedirects: an endpoint answering 307 cannot
// make the fixer resend the code and the key elsewhere; the default client
// ignores the proxy environment too.
func TestOpenAIFixerDoesNotFollowRedirects(t *testing.T) {
	const key = "sk-test-SECRET-redirect"
	t.Setenv("JAILCELL_TEST_OPENAI_KEY", key)
	var hits atomic.Int32
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"choices":[{"message":{"content":"print(1)"}}]}`))
	}))
	defer b.Close()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
	}))
	defer a.Close()
	f := &OpenAIFixer{BaseURL: a.URL + "/v1", Model: "m", APIKeyEnv: "JAILCELL_TEST_OPENAI_KEY"}
	code, err := f.Fix(context.Background(), FixInput{Code: "1/0", Error: "ZeroDivisionError", Attempt: 1})
	if err == nil || !strings.Contains(err.Error(), "HTTP 307") || code != "" {
		t.Errorf("Fix = %q, %v; want an HTTP 307 error", code, err)
	}
	if err != nil && strings.Contains(err.Error(), key) {
		t.Errorf("the error carries the key: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
	tr, ok := fixerClient.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil {
		t.Errorf("the default client's transport %T reads a proxy", fixerClient.Transport)
	}
}
