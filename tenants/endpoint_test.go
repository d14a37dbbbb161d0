package tenants

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/routebalance/routebalance/routing"
)

type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range f[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, errors.New("no such host")
	}
	return out, nil
}

func TestEndpointPolicy(t *testing.T) {
	res := fakeResolver{
		"vllm.example.com":  {"203.0.113.10"},
		"internal.corp":     {"10.1.2.3"},
		"rebind.example":    {"203.0.113.11", "169.254.169.254"},
		"v6meta.example":    {"fd00:ec2::254"},
		"mixed.example.com": {"203.0.113.12", "127.0.0.1"},
	}
	const (
		ok      = "ok"
		refused = "refused" // ErrEndpointRefused regardless of AllowPrivate
		private = "private" // refused unless AllowPrivate
		bad     = "bad"     // malformed
	)
	for _, tc := range []struct {
		url, want string
	}{
		{"https://vllm.example.com:8000/", ok},
		{"http://203.0.113.5:8000", ok},
		{"http://169.254.169.254/latest/meta-data", refused},
		{"http://169.254.1.1:8000", refused},
		{"http://[fe80::1]:8000", refused},
		{"http://[fe80::1%25eth0]:8000", refused},
		{"http://[fd00:ec2::254]", refused},
		{"http://v6meta.example", refused},
		{"http://metadata.google.internal/computeMetadata/v1", refused},
		{"http://METADATA.GOOGLE.INTERNAL.", refused},
		{"http://[::ffff:169.254.169.254]", refused},
		{"http://[64:ff9b::a9fe:a9fe]", refused},
		{"http://100.100.100.200", refused},
		{"http://0.0.0.0:8000", refused},
		{"http://[::]:8000", refused},
		{"http://224.0.0.1", refused},
		{"http://rebind.example", refused},
		{"http://127.0.0.1:8000", private},
		{"http://[::1]:8000", private},
		{"http://10.0.0.5:8000", private},
		{"http://172.16.3.4", private},
		{"http://192.168.1.10:8000", private},
		{"http://[fd12::1]", private},
		{"http://100.64.0.1", private},
		{"http://internal.corp:8000", private},
		{"http://mixed.example.com", private},
		{"ftp://vllm.example.com", bad},
		{"vllm.example.com:8000", bad},
		{"http://user:pw@vllm.example.com", bad},
		{"http://vllm.example.com/?x=1", bad},
		{"http:///nohost", bad},
		{"http://nx.example.com", bad},
		{"", bad},
	} {
		for _, allow := range []bool{false, true} {
			p := EndpointPolicy{AllowPrivate: allow, Resolver: res}
			_, err := p.CheckURL(context.Background(), "base_url", tc.url)
			want := tc.want
			if want == private && allow {
				want = ok
			}
			var fe *routing.FieldError
			switch want {
			case ok:
				if err != nil {
					t.Errorf("allow=%v %q: refused: %v", allow, tc.url, err)
				}
			case refused, private:
				if !errors.Is(err, ErrEndpointRefused) || !errors.As(err, &fe) || fe.Field != "base_url" {
					t.Errorf("allow=%v %q: got %v, want an ErrEndpointRefused field error", allow, tc.url, err)
				}
			case bad:
				if err == nil || !errors.As(err, &fe) || errors.Is(err, ErrEndpointRefused) {
					t.Errorf("allow=%v %q: got %v, want a malformed-URL field error", allow, tc.url, err)
				}
			}
		}
	}
	got, err := EndpointPolicy{Resolver: res}.CheckURL(context.Background(), "base_url", "https://vllm.example.com:8000/v1/")
	if err != nil || got != "https://vllm.example.com:8000/v1" {
		t.Errorf("normalised URL = %q, %v", got, err)
	}
	if err := (EndpointPolicy{}).DialControl("tcp", "169.254.169.254:80", nil); !errors.Is(err, ErrEndpointRefused) {
		t.Errorf("DialControl let the metadata address through: %v", err)
	}
	if err := (EndpointPolicy{AllowPrivate: true}).DialControl("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("DialControl refused loopback with AllowPrivate: %v", err)
	}
}
