//! Long-lived gNMI subscriptions: STREAM with SAMPLE at the poll interval, or POLL driven by
//! the exporter's own ticker. Leaves are cached by path; a complete view of the cache is handed
//! over after the target's first sync and then once per interval. A session ends with the
//! error that ended it; the poller reconnects with backoff.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::proto::subscribe_request::Request as SubscribeKind;
use super::proto::subscribe_response::Response as SubscribeAnswer;
use super::proto::subscription_list::Mode;
use super::{
    choose_encoding, collect_update, connect, proto, render, status_error, with_credentials,
};
use super::{GnmiTarget, GnmiUpdate};
use crate::switch::snmp::PollError;

/// Leaves one target may hold; a target that floods more ends its session instead of growing
/// memory without bound (a 64-port SONiC switch sends about 20 000).
pub const MAX_LEAVES: usize = 1_000_000;

/// How a long-lived subscription gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    /// The target samples every interval and pushes (SubscriptionList STREAM, SAMPLE).
    Stream,
    /// The exporter asks every interval on the open stream (SubscriptionList POLL).
    Poll,
}

/// A SubscriptionList request for `paths`; SAMPLE at `sample_interval` for STREAM.
pub(crate) fn subscription(
    paths: &[proto::Path],
    mode: Mode,
    encoding: proto::Encoding,
    sample_interval: Option<Duration>,
) -> proto::SubscribeRequest {
    let subscription = paths
        .iter()
        .map(|path| proto::Subscription {
            path: Some(path.clone()),
            mode: if sample_interval.is_some() {
                proto::SubscriptionMode::Sample as i32
            } else {
                proto::SubscriptionMode::TargetDefined as i32
            },
            sample_interval: sample_interval.map_or(0, |i| i.as_nanos() as u64),
            ..Default::default()
        })
        .collect();
    proto::SubscribeRequest {
        request: Some(SubscribeKind::Subscribe(proto::SubscriptionList {
            subscription,
            mode: mode as i32,
            encoding: encoding as i32,
            ..Default::default()
        })),
    }
}

/// The target's leaves as last reported, grouped by the update that carried them: a document
/// (SONiC sends a table as one JSON value) replaces exactly what its previous version carried,
/// so ports that disappear go, and a sample cut short leaves the other documents intact.
#[derive(Default)]
struct LeafCache {
    by_update: BTreeMap<String, Vec<GnmiUpdate>>,
    leaves: usize,
}

/// `path` is `root` or lies below it (`root/...`, or a list entry `root[...]`).
fn is_below(path: &str, root: &str) -> bool {
    path.starts_with(root)
        && (path.len() == root.len() || matches!(path.as_bytes()[root.len()], b'/' | b'['))
}

impl LeafCache {
    /// A gNMI delete: every leaf at or below `root`, whichever update carried it.
    fn delete(&mut self, root: &str) {
        self.by_update.retain(|update_path, leaves| {
            if is_below(update_path, root) {
                return false;
            }
            leaves.retain(|leaf| !is_below(&leaf.path, root));
            !leaves.is_empty()
        });
    }

    fn apply(&mut self, notification: &proto::Notification) -> Result<(), PollError> {
        let prefix = notification.prefix.as_ref();
        for deleted in &notification.delete {
            self.delete(&render(prefix, Some(deleted)));
        }
        for update in &notification.update {
            let mut leaves = Vec::new();
            let root = collect_update(prefix, update, &mut leaves)?;
            self.by_update.insert(root, leaves);
        }
        self.leaves = self.by_update.values().map(Vec::len).sum();
        if self.leaves > MAX_LEAVES {
            return Err(PollError {
                reason: "too_many_leaves",
                detail: format!("the target sent more than {MAX_LEAVES} leaves"),
            });
        }
        Ok(())
    }

    fn view(&self) -> Vec<GnmiUpdate> {
        let mut view = Vec::with_capacity(self.leaves);
        view.extend(self.by_update.values().flatten().cloned());
        view
    }
}

/// Runs one subscription until it fails; `deliver` receives each complete view with the time
/// its newest leaf arrived. Returns the error that ended the session and whether it delivered
/// anything (the poller resets its backoff then).
pub async fn run(
    target: &GnmiTarget,
    paths: &[proto::Path],
    mode: SessionMode,
    interval: Duration,
    mut deliver: impl FnMut(Vec<GnmiUpdate>, Instant) + Send,
) -> (PollError, bool) {
    let mut delivered = false;
    let error = match subscribe(target, paths, mode, interval, &mut |view, at| {
        delivered = true;
        deliver(view, at)
    })
    .await
    {
        Ok(never) => match never {},
        Err(e) => e,
    };
    (error, delivered)
}

async fn subscribe(
    target: &GnmiTarget,
    paths: &[proto::Path],
    mode: SessionMode,
    interval: Duration,
    deliver: &mut (dyn FnMut(Vec<GnmiUpdate>, Instant) + Send),
) -> Result<std::convert::Infallible, PollError> {
    let timeout = |what: &str| PollError {
        reason: "timeout",
        detail: format!("{what} took longer than {:?}", target.timeout),
    };
    let mut client = connect(target).await?;
    let encoding = tokio::time::timeout(target.timeout, choose_encoding(&mut client, target))
        .await
        .map_err(|_| timeout("Capabilities"))??;
    let (requests, outgoing) = mpsc::channel(4);
    let first = match mode {
        SessionMode::Stream => subscription(paths, Mode::Stream, encoding, Some(interval)),
        SessionMode::Poll => subscription(paths, Mode::Poll, encoding, None),
    };
    requests.send(first).await.expect("the receiver is alive");
    let request = with_credentials(target, ReceiverStream::new(outgoing), None)?;
    let mut answers = tokio::time::timeout(target.timeout, client.subscribe(request))
        .await
        .map_err(|_| timeout("opening the subscription"))?
        .map_err(|s| status_error(&s))?
        .into_inner();

    let mut cache = LeafCache::default();
    let mut synced = false;
    let mut changed = false;
    let mut last_message = Instant::now();
    // A SAMPLE stream speaks every interval; silence for two is a dead stream, as is a poll
    // left unanswered.
    let silence_limit = interval * 2 + target.timeout;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            answer = answers.message() => {
                let answer = answer.map_err(|s| status_error(&s))?.ok_or_else(|| PollError {
                    reason: "stream_closed",
                    detail: "the target ended the subscription".into(),
                })?;
                last_message = Instant::now();
                match answer.response {
                    Some(SubscribeAnswer::Update(notification)) => {
                        cache.apply(&notification)?;
                        changed = true;
                    }
                    Some(SubscribeAnswer::SyncResponse(_)) => {
                        // STREAM: the initial view is complete. POLL: one answer is complete.
                        synced = true;
                        changed = false;
                        deliver(cache.view(), last_message);
                    }
                    None => {}
                }
            }
            _ = ticker.tick() => {
                if last_message.elapsed() > silence_limit {
                    return Err(PollError {
                        reason: "stalled",
                        detail: format!("nothing received for {:?}", last_message.elapsed()),
                    });
                }
                match mode {
                    SessionMode::Stream if synced && changed => {
                        changed = false;
                        deliver(cache.view(), last_message);
                    }
                    SessionMode::Stream => {}
                    SessionMode::Poll => {
                        let poll = proto::SubscribeRequest {
                            request: Some(SubscribeKind::Poll(proto::Poll {})),
                        };
                        if requests.send(poll).await.is_err() {
                            return Err(PollError {
                                reason: "stream_closed",
                                detail: "the subscription's request stream closed".into(),
                            });
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::switch::gnmi::GnmiValue;

    fn json_update(path: &str, json: &str) -> proto::Update {
        proto::Update {
            path: Some(super::super::parse_path(path).unwrap()),
            val: Some(proto::TypedValue {
                value: Some(proto::typed_value::Value::JsonIetfVal(
                    json.as_bytes().to_vec(),
                )),
            }),
            duplicates: 0,
        }
    }

    fn notification(updates: Vec<proto::Update>, delete: Vec<proto::Path>) -> proto::Notification {
        proto::Notification {
            update: updates,
            delete,
            ..Default::default()
        }
    }

    #[test]
    fn a_document_replaces_what_was_below_it() {
        let mut cache = LeafCache::default();
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"1"},"Ethernet4":{"A":"2"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        assert_eq!(cache.leaves, 2);
        // Ethernet4 is gone from the next sample: its leaf goes too.
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"3"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        let view = cache.view();
        assert_eq!(view.len(), 1);
        assert_eq!(view[0].path, "/COUNTERS/Ethernet*/Ethernet0/A");
        assert_eq!(view[0].value, GnmiValue::Text("3".into()));
        // Another document below the first one's path is its own: the next sample of the
        // first leaves it alone.
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*/Queues",
                    r#"{"Ethernet0:3":{"B":"4"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        cache
            .apply(&notification(
                vec![json_update(
                    "COUNTERS_DB:COUNTERS/Ethernet*",
                    r#"{"Ethernet0":{"A":"5"}}"#,
                )],
                vec![],
            ))
            .unwrap();
        assert_eq!(cache.view().len(), 2);
        // A sibling whose name merely starts with the root survives a delete of the root.
        cache
            .apply(&notification(
                vec![
                    json_update("/x/ab", r#"{"c": 1}"#),
                    json_update("/x/a", r#"{"c": 2}"#),
                ],
                vec![],
            ))
            .unwrap();
        cache
            .apply(&notification(
                vec![],
                vec![super::super::parse_path("/x/a").unwrap()],
            ))
            .unwrap();
        let paths: Vec<String> = cache.view().into_iter().map(|u| u.path).collect();
        assert!(paths.contains(&"/x/ab/c".to_string()), "{paths:?}");
        assert!(!paths.contains(&"/x/a/c".to_string()), "{paths:?}");
    }
}
