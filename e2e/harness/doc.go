// Package harness starts the real services Scour talks to in production, a
// RabbitMQ broker and an OpenStack Placement API, for end-to-end tests in any
// package, and drives them the way Nova does.
//
// Services run in containers (testcontainers-go over podman's Docker API; see
// docs/e2e.md and `make e2e-env`) started once per test package:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		b := harness.StartRabbitMQ(t).VHost(t) // shared broker, private vhost
//		p := harness.StartPlacement(t)         // shared Placement, private proxy
//		node := p.SeedComputeNode(t, harness.UniqueName("cn"), harness.Device{...})
//		...
//	}
//
// Tests isolate themselves by names: UniqueName for compute nodes, a vhost per
// test for notifications. Faults that touch a whole service (Stop, Start,
// Restart) need a container of the test's own: pass Dedicated().
//
// With SCOUR_E2E_AMQP_URL / SCOUR_E2E_PLACEMENT_URL set, the harness uses those
// endpoints instead of containers; controls that need a container then skip.
package harness
