//! `--kv-events-config`: the engine's KV cache events published as vLLM 0.34 publishes them
//! (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`), so a KV-cache-aware router (llm-d's
//! kv-cache indexer) can subscribe to the twin as it would to vLLM: a ZMQ PUB socket, one
//! three-frame message per engine step that changed the cache — `[topic, seq (8-byte big-endian,
//! from 0), msgpack(KVEventBatch)]`.
//!
//! The batch is msgspec's `array_like` `[ts, events, data_parallel_rank]`; each event a tagged
//! map with defaults omitted (`omit_defaults=True`): BlockStored `{type, block_hashes,
//! parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, group_idx}`,
//! BlockRemoved `{type, block_hashes, medium, group_idx}`, AllBlocksCleared `{type}`. Block
//! hashes are integers (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, on by default): the low 64
//! bits of the twin's 128-bit hash.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tokio::sync::mpsc;
use twin_engine::{KvCacheEvent, KvEvents};
use zeromq::{Socket, SocketSend, ZmqMessage};

/// What `--kv-events-config` asks for (vLLM's `KVEventsConfig`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvEventsConfig {
    #[serde(default)]
    pub enable_kv_cache_events: bool,
    #[serde(default)]
    pub publisher: Option<String>,
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    #[serde(default)]
    pub replay_endpoint: Option<String>,
    #[serde(default = "default_buffer_steps")]
    pub buffer_steps: usize,
    #[serde(default = "default_queue")]
    pub hwm: usize,
    #[serde(default = "default_queue")]
    pub max_queue_size: usize,
    #[serde(default)]
    pub topic: String,
}

fn default_endpoint() -> String {
    "tcp://*:5557".into()
}
fn default_buffer_steps() -> usize {
    10_000
}
fn default_queue() -> usize {
    100_000
}

/// The most batches waiting to be published (vLLM's `max_queue_size` is capped here too).
pub const MAX_QUEUE: usize = 1_000_000;

/// Parse `--kv-events-config JSON`. `Ok(None)`: events off (or the `null` publisher).
pub fn parse_kv_events_config(json: &str) -> Result<Option<KvEventsConfig>, String> {
    let c: KvEventsConfig = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let publisher = c.publisher.clone().unwrap_or_else(|| {
        if c.enable_kv_cache_events {
            "zmq".into()
        } else {
            "null".into()
        }
    });
    match publisher.as_str() {
        "null" => return Ok(None),
        "zmq" => {}
        other => return Err(format!("publisher {other:?}: one of \"null\", \"zmq\"")),
    }
    if !c.enable_kv_cache_events {
        return Ok(None);
    }
    if c.replay_endpoint.is_some() {
        return Err("replay_endpoint: the twin's publisher has no replay socket".into());
    }
    if !c.endpoint.starts_with("tcp://") {
        return Err(format!(
            "endpoint {:?}: the twin publishes over tcp:// only",
            c.endpoint
        ));
    }
    if c.max_queue_size == 0 || c.max_queue_size > MAX_QUEUE {
        return Err(format!("max_queue_size: between 1 and {MAX_QUEUE}"));
    }
    Ok(Some(c))
}

/// The endpoint of rank `offset`: its port plus the offset, as vLLM gives each data-parallel
/// rank its own socket (`ZmqEventPublisher.offset_endpoint_port`); `serve --replicas` gives
/// replica i the offset i.
pub fn offset_endpoint_port(endpoint: &str, offset: usize) -> Result<String, String> {
    if offset == 0 {
        return Ok(endpoint.to_string());
    }
    let (head, port) = endpoint
        .rsplit_once(':')
        .ok_or_else(|| format!("endpoint {endpoint:?} has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("endpoint {endpoint:?}: the port is not a number"))?;
    let shifted = u16::try_from(usize::from(port) + offset).map_err(|_| {
        format!("endpoint {endpoint:?}: port {port} + replica {offset} is past 65535")
    })?;
    Ok(format!("{head}:{shifted}"))
}

/// vLLM binds when the endpoint has a wildcard host; `*` becomes every IPv4 interface.
fn bind_address(endpoint: &str) -> Option<String> {
    let rest = endpoint.strip_prefix("tcp://")?;
    let (host, port) = rest.rsplit_once(':')?;
    match host {
        "*" => Some(format!("tcp://0.0.0.0:{port}")),
        "::" | "[::]" => Some(format!("tcp://[::]:{port}")),
        _ => None,
    }
}

/// An in-process consumer of a replica's events (the fleet front's prefix-aware router).
pub type KvEventFeed = Arc<dyn Fn(&[KvCacheEvent]) + Send + Sync>;

/// The engine thread's handle: encoded batches go to the publisher task, raw events to the
/// in-process feed.
#[derive(Clone, Default)]
pub struct KvEventSink {
    zmq: Option<(mpsc::Sender<Vec<u8>>, usize)>,
    feed: Option<KvEventFeed>,
}

impl KvEventSink {
    /// Also hand each step's events to `feed`.
    pub fn with_feed(mut self, feed: KvEventFeed) -> Self {
        self.feed = Some(feed);
        self
    }

    /// Encode one step's events and queue them; a full queue drops the batch (vLLM's
    /// high-water mark drops too).
    pub fn publish(&self, events: &KvEvents) {
        if events.is_empty() {
            return;
        }
        if let Some(feed) = &self.feed {
            feed(&events.events);
        }
        if let Some((tx, block_size)) = &self.zmq {
            let ts = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let _ = tx.try_send(encode_batch(ts, events, *block_size, 0));
        }
    }
}

/// Bind (or connect) the PUB socket and start publishing. vLLM: `ZmqEventPublisher`.
pub async fn start_publisher(
    cfg: &KvEventsConfig,
    block_size: usize,
) -> Result<KvEventSink, String> {
    let mut socket = zeromq::PubSocket::new();
    match bind_address(&cfg.endpoint) {
        Some(addr) => socket
            .bind(&addr)
            .await
            .map(|_| ())
            .map_err(|e| format!("cannot bind {}: {e}", cfg.endpoint))?,
        None => socket
            .connect(&cfg.endpoint)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", cfg.endpoint))?,
    }
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(cfg.max_queue_size.min(cfg.hwm.max(1)));
    let topic = cfg.topic.clone().into_bytes();
    tokio::spawn(async move {
        let mut seq: u64 = 0;
        while let Some(payload) = rx.recv().await {
            let mut msg = ZmqMessage::from(topic.clone());
            msg.push_back(seq.to_be_bytes().to_vec().into());
            msg.push_back(payload.into());
            // No subscriber yet, or a slow one: PUB drops, as libzmq does.
            let _ = socket.send(msg).await;
            seq += 1;
        }
    });
    Ok(KvEventSink {
        zmq: Some((tx, block_size)),
        feed: None,
    })
}

/// The low 64 bits: vLLM's `maybe_convert_block_hash` with integer hashes.
fn external_hash(h: u128) -> u64 {
    h as u64
}

/// msgpack of `KVEventBatch(ts, events, data_parallel_rank)`.
pub fn encode_batch(ts: f64, events: &KvEvents, block_size: usize, dp_rank: u32) -> Vec<u8> {
    use rmp::encode::{
        write_array_len, write_f64, write_map_len, write_nil, write_str, write_u32, write_u64,
    };
    let mut out = Vec::with_capacity(64 + events.events.len() * 128);
    // Writing to a Vec cannot fail.
    let w = &mut out;
    let _ = write_array_len(w, 3);
    let _ = write_f64(w, ts);
    let _ = write_array_len(w, events.events.len() as u32);
    for ev in &events.events {
        match *ev {
            KvCacheEvent::BlockStored {
                block_hash,
                parent_block_hash,
                ..
            } => {
                let _ = write_map_len(w, 9);
                let _ = write_str(w, "type");
                let _ = write_str(w, "BlockStored");
                let _ = write_str(w, "block_hashes");
                let _ = write_array_len(w, 1);
                let _ = write_u64(w, external_hash(block_hash));
                let _ = write_str(w, "parent_block_hash");
                match parent_block_hash {
                    Some(p) => {
                        let _ = write_u64(w, external_hash(p));
                    }
                    None => {
                        let _ = write_nil(w);
                    }
                }
                let _ = write_str(w, "token_ids");
                let tokens = events.tokens(ev);
                let _ = write_array_len(w, tokens.len() as u32);
                for &t in tokens {
                    let _ = write_u32(w, t);
                }
                let _ = write_str(w, "block_size");
                let _ = write_u64(w, block_size as u64);
                let _ = write_str(w, "lora_id");
                let _ = write_nil(w);
                let _ = write_str(w, "medium");
                let _ = write_str(w, "GPU");
                let _ = write_str(w, "lora_name");
                let _ = write_nil(w);
                let _ = write_str(w, "group_idx");
                let _ = write_u32(w, 0);
            }
            KvCacheEvent::BlockRemoved { block_hash, .. } => {
                let _ = write_map_len(w, 4);
                let _ = write_str(w, "type");
                let _ = write_str(w, "BlockRemoved");
                let _ = write_str(w, "block_hashes");
                let _ = write_array_len(w, 1);
                let _ = write_u64(w, external_hash(block_hash));
                let _ = write_str(w, "medium");
                let _ = write_str(w, "GPU");
                let _ = write_str(w, "group_idx");
                let _ = write_u32(w, 0);
            }
            KvCacheEvent::AllBlocksCleared => {
                let _ = write_map_len(w, 1);
                let _ = write_str(w, "type");
                let _ = write_str(w, "AllBlocksCleared");
            }
        }
    }
    let _ = write_u32(w, dp_rank);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_publish_on_consecutive_ports() {
        assert_eq!(
            offset_endpoint_port("tcp://*:5557", 0).unwrap(),
            "tcp://*:5557"
        );
        assert_eq!(
            offset_endpoint_port("tcp://*:5557", 3).unwrap(),
            "tcp://*:5560"
        );
        assert!(offset_endpoint_port("tcp://*:65535", 1).is_err());
    }

    #[test]
    fn config_follows_vllms_defaults_and_refuses_what_is_not_modelled() {
        assert_eq!(parse_kv_events_config("{}").unwrap(), None);
        let c = parse_kv_events_config(r#"{"enable_kv_cache_events": true}"#)
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "tcp://*:5557");
        assert_eq!(
            bind_address(&c.endpoint).as_deref(),
            Some("tcp://0.0.0.0:5557")
        );
        assert_eq!(
            parse_kv_events_config(r#"{"enable_kv_cache_events": true, "publisher": "null"}"#)
                .unwrap(),
            None
        );
        for bad in [
            r#"{"enable_kv_cache_events": true, "publisher": "kafka"}"#,
            r#"{"enable_kv_cache_events": true, "replay_endpoint": "tcp://*:5558"}"#,
            r#"{"enable_kv_cache_events": true, "endpoint": "ipc:///tmp/x"}"#,
            r#"{"enable_kv_cache_events": true, "endpiont": "tcp://*:1"}"#,
            r#"not json"#,
        ] {
            assert!(parse_kv_events_config(bad).is_err(), "{bad}");
        }
    }
}
