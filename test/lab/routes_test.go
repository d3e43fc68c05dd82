package lab

import (
	"net/netip"
	"strings"
	"testing"
)

// What `ip -j route show table all` printed on this machine (eth0 192.0.2.2/24, fd00::2/64).
const hostRoutes = `[{"dst":"default","gateway":"192.0.2.1","dev":"eth0","flags":[]},
{"dst":"192.0.2.0/24","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"192.0.2.2","flags":[]},
{"type":"local","dst":"192.0.2.2","table":"local","dev":"eth0","protocol":"kernel","scope":"host","prefsrc":"192.0.2.2","flags":[]},
{"type":"broadcast","dst":"192.0.2.255","table":"local","dev":"eth0","protocol":"kernel","scope":"link","prefsrc":"192.0.2.2","flags":[]},
{"type":"local","dst":"127.0.0.0/8","table":"local","dev":"lo","protocol":"kernel","scope":"host","prefsrc":"127.0.0.1","flags":[]},
{"dst":"fd00::/64","dev":"eth0","protocol":"kernel","metric":256,"flags":[],"pref":"medium"},
{"type":"multicast","dst":"ff00::/8","table":"local","dev":"eth0","protocol":"kernel","metric":256,"flags":[],"pref":"medium"}]`

func TestCheckRoutesFree(t *testing.T) {
	for _, tc := range []struct {
		prefixes []string
		wantErr  bool
	}{
		{[]string{"10.89.0.0/24", "10.244.0.0/16"}, false}, // only the default route covers them
		{[]string{"192.0.2.0/24"}, true},                   // the host's eth0 network
		{[]string{"192.0.2.0/28"}, true},                   // inside it
		{[]string{"192.0.0.0/16"}, true},                   // around it
		{[]string{"127.0.0.0/24"}, true},                   // loopback
		{[]string{"10.89.0.0/24", "192.0.2.128/25"}, true}, // one of several
	} {
		var ps []netip.Prefix
		for _, p := range tc.prefixes {
			ps = append(ps, netip.MustParsePrefix(p))
		}
		err := CheckRoutesFree([]byte(hostRoutes), ps)
		if (err != nil) != tc.wantErr {
			t.Errorf("%v: err=%v, want error %v", tc.prefixes, err, tc.wantErr)
		}
	}
	// Another lab's routes are refused, and the error says so.
	other := `[{"dst":"10.89.0.0/24","gateway":"172.31.4.2","dev":"sl3f0ak","flags":[]}]`
	err := CheckRoutesFree([]byte(other), []netip.Prefix{netip.MustParsePrefix("10.89.0.0/24")})
	if err == nil || !strings.Contains(err.Error(), "another real-kubelet lab") {
		t.Errorf("another lab's route: err=%v, want the other lab named", err)
	}
	if err := CheckRoutesFree([]byte("not json"), nil); err == nil {
		t.Error("unparsable route list accepted")
	}
}
