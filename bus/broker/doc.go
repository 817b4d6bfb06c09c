// Package broker is scour's AMQP transport: the broker URL (Nova's
// transport_url form, multi-host failover, TLS), a connection that
// re-dials whenever it drops (Conn), and a watermill Publisher and
// Subscriber on it. Nothing of scour's own queues is in it: the bus
// declares those through SubscriberConfig.Declare.
//
// # Watermill's contract, and where this package departs from it
//
// The Publisher and Subscriber are run against watermill's own pub/sub
// test suite (github.com/ThreeDotsLabs/watermill/pubsub/tests) on the real
// broker by TestWatermillPubSub, with the Features they honestly have:
// consumer groups (a queue per group), persistent, at-least-once (no
// exactly-once), no order, no Go context carried across the broker. A
// topic is a queue for the Subscriber and a routing key for the Publisher;
// the suite's adapter declares a topic's queue in SubscribeInitialize, as
// the bus declares its topology before it publishes. The departures, on
// purpose, and the tests that cover them:
//
//  1. No order, no waiting for the ack. Every delivery the prefetch window
//     allows is handed over at once, without waiting for the previous
//     message's ack, because the router runs each handler in a goroutine
//     of its own and a handler waiting for a publisher confirm must not
//     hold up the ones behind it (watermill-amqp hands over one message
//     per subscription at a time); a nack requeues the message behind the
//     others. Watermill's TestNoAck and TestPublishSubscribeInOrder
//     therefore do not apply (GuaranteedOrder false) and are skipped.
//     Covered by TestSubscriberHandsOverBeforeAck here and by the bus's
//     TestHandlerConcurrencyIsBounded (what bounds the handlers instead).
//  2. Graceful Close. Close (or the end of the Subscribe context) cancels
//     the consumers at once, but a message already handed over keeps a
//     live context until it is settled or SubscriberConfig.ShutdownTimeout
//     has passed since Close, so a cleaning command being handled is not
//     cut short by a restart; then its context ends and the broker
//     requeues it. Watermill's subscribers end it at Close; its
//     TestMessageCtx passes here only because it waits 15 s and the suite
//     uses a 1 s ShutdownTimeout. Covered by the bus's
//     TestGracefulShutdownFinishesInFlight. A settled message's context
//     ends as in watermill (TestMessageContextEndsWhenSettled).
//  3. Subscribe never fails. A queue that cannot be consumed (the broker
//     is down, a declare is refused) is retried with backoff, declaring it
//     again first, until it can or the subscription ends; a channel or
//     connection lost later is re-subscribed the same way. Covered by
//     TestSubscribeRetriesCountedAndWarnedOnce, and the reconnect by
//     TestConnReconnectsUntilClosed and the bus's
//     TestNoLossNoDuplicateAcrossConnectionLoss. Watermill's TestReconnect
//     is skipped (no RestartServiceCommand): it restarts the broker, which
//     every test on the machine shares.
//  4. Metadata. AMQP headers that are not strings are stringified, not
//     refused (a refused message would be requeued for ever); a message
//     the broker redelivers carries MetadataRedelivered; one without a
//     message id (oslo.messaging sets none) is named by its consumer tag
//     and delivery tag. Covered by TestToMessageMetadata.
package broker
