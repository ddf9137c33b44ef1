package workload

import "fmt"

// Tenants and priority bands, for overload workloads (issue 26): who sends
// each request, so that flow control's per-tenant fairness and band order
// have something to act on and the replay can report attainment per
// tenant and per band.
//
// With Mix.Tenants = N, requests (a chat or agent session as a whole)
// belong to N well-behaved tenants "t01".."tNN" in equal shares; with
// Mix.NoisyFactor = f > 0, one more tenant, NoisyTenant, sends f times a
// well-behaved tenant's share (f = 5: "a tenant at 5× its share"). With
// Mix.HighShare = h > 0, a share h of them is in priority band 1 (the
// top), the rest in band 0. Owners are drawn on a random stream of their
// own, so a mix without them is unchanged.

// NoisyTenant names the tenant that sends Mix.NoisyFactor times its share.
const NoisyTenant = "noisy"

// MaxTenants bounds Mix.Tenants.
const MaxTenants = 1000

func (m *Mix) checkOwners() error {
	switch {
	case m.Tenants < 0 || m.Tenants > MaxTenants:
		return fmt.Errorf("workload %s: tenants %d outside [0, %d]", m.Name, m.Tenants, MaxTenants)
	case !(m.NoisyFactor >= 0 && m.NoisyFactor <= 1000):
		return fmt.Errorf("workload %s: noisy factor %v outside [0, 1000]", m.Name, m.NoisyFactor)
	case m.NoisyFactor > 0 && m.Tenants < 1:
		return fmt.Errorf("workload %s: a noisy tenant needs well-behaved tenants beside it (tenants ≥ 1)", m.Name)
	case !(m.HighShare >= 0 && m.HighShare < 1):
		return fmt.Errorf("workload %s: high-band share %v outside [0, 1)", m.Name, m.HighShare)
	}
	return nil
}

// owner draws a new request's or session's tenant and band.
func (g *generator) owner() owner {
	m := g.m
	var o owner
	if m.Tenants > 0 {
		u := g.orand.Float64() * (float64(m.Tenants) + m.NoisyFactor)
		if k := int(u); k < m.Tenants {
			o.tenant = fmt.Sprintf("t%02d", k+1)
		} else {
			o.tenant = NoisyTenant
		}
	}
	if m.HighShare > 0 && g.orand.Float64() < m.HighShare {
		o.priority = 1
	}
	return o
}
