package tenants

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/routebalance/routebalance/routing"
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies
// it; tests inject a fixed table.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// EndpointPolicy decides which upstream URLs tenants may register and which
// addresses the service may connect to on their behalf.
//
// Always refused: link-local addresses (169.254.0.0/16, fe80::/10),
// cloud metadata services (169.254.169.254, fd00:ec2::254, 100.100.100.200,
// metadata.google.internal and friends), unspecified, multicast and
// broadcast addresses, and IPv4 written inside IPv6 (mapped, NAT64) when the
// embedded address is refused. Loopback (127.0.0.0/8, ::1), private
// (10/8, 172.16/12, 192.168/16, fc00::/7) and shared (100.64/10) ranges
// are refused unless AllowPrivate is set.
type EndpointPolicy struct {
	AllowPrivate bool
	// Resolver resolves host names; nil uses net.DefaultResolver.
	Resolver Resolver
}

var blockedHosts = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
	"metadata.azure.internal":    true,
}

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"),
		netip.MustParseAddr("fd00:ec2::254"),
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("169.254.170.2"),   // ECS task metadata
	}
	sharedRange = netip.MustParsePrefix("100.64.0.0/10")
	nat64Range  = netip.MustParsePrefix("64:ff9b::/96")
)

// ErrEndpointRefused is wrapped by every refusal of CheckURL and CheckAddr.
var ErrEndpointRefused = errors.New("endpoint refused")

// CheckAddr reports whether the service may connect to ip.
func (p EndpointPolicy) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() && nat64Range.Contains(ip) {
		b := ip.As16()
		if err := p.CheckAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); err != nil {
			return err
		}
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return fmt.Errorf("%w: %s is a cloud metadata address", ErrEndpointRefused, ip)
		}
	}
	switch {
	case !ip.IsValid():
		return fmt.Errorf("%w: invalid address", ErrEndpointRefused)
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return fmt.Errorf("%w: %s is link-local", ErrEndpointRefused, ip)
	case ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%w: %s is not a unicast address", ErrEndpointRefused, ip)
	case ip.IsLoopback() || ip.IsPrivate() || sharedRange.Contains(ip):
		if !p.AllowPrivate {
			return fmt.Errorf("%w: %s is a loopback or private address (the operator has not allowed private endpoints)", ErrEndpointRefused, ip)
		}
	}
	return nil
}

// CheckURL validates an instance base URL and every address its host
// resolves to. It returns the normalised URL (no trailing slash) or a
// *routing.FieldError for field wrapping ErrEndpointRefused or describing
// the malformation.
func (p EndpointPolicy) CheckURL(ctx context.Context, field, raw string) (string, error) {
	fail := func(format string, a ...any) error {
		return &routing.FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || raw == "" {
		return "", fail("must be an absolute http(s) URL like http://10.0.0.5:8000")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fail("scheme must be http or https, got %q", u.Scheme)
	}
	if u.User != nil {
		return "", fail("must not contain credentials; use api_key")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fail("must not have a query or fragment")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return "", fail("must name a host")
	}
	if blockedHosts[host] {
		return "", &refusal{field: field, err: fmt.Errorf("%w: %s is a cloud metadata host", ErrEndpointRefused, host)}
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		r := p.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		addrs, err = r.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return "", fail("host %q does not resolve", host)
		}
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			return "", &refusal{field: field, err: err}
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// refusal is a FieldError-compatible refusal that still matches
// ErrEndpointRefused with errors.Is.
type refusal struct {
	field string
	err   error
}

func (r *refusal) Error() string { return r.field + ": " + r.err.Error() }
func (r *refusal) Unwrap() []error {
	return []error{r.err, &routing.FieldError{Field: r.field, Msg: r.err.Error()}}
}

// DialControl is a net.Dialer Control function that refuses connections to
// addresses the policy forbids. It checks the address actually dialled, so
// a host name that resolves differently later (DNS rebinding) or a redirect
// cannot reach a forbidden address. The proxy and the connection test use
// it.
func (p EndpointPolicy) DialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q", ErrEndpointRefused, address)
	}
	return p.CheckAddr(ap.Addr())
}
