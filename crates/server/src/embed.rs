//! Embeddings and reranking over an encoder model ([`gguf_models::Encoder`]: bert,
//! nomic-bert): llama-server's `/embedding`, `/embeddings` (its own response shape),
//! `/v1/embeddings` (OpenAI's) and `/rerank` (Jina's shape; TEI's when the request has
//! `texts`). A server whose model is an encoder answers these and refuses generation; a
//! generative model's server refuses these (llama-server: "start it with `--embeddings`").
//!
//! Each input is tokenized as llama-server does (special tokens added and parsed; a list
//! of token ids taken as given), encoded on its own and pooled by the server's pooling
//! (`--pooling`, default the file's). Pooled vectors are normalized by the request's
//! `embd_normalize` (default 2, Euclidean; llama.cpp's `common_embd_normalize`); per-token
//! vectors (pooling `none`, non-OpenAI endpoint only) are not. A rerank pair is the
//! file's `tokenizer.chat_template.rerank` with `{query}` / `{document}` filled in, or else
//! `[BOS] query [EOS] [SEP] document [EOS]` by the vocabulary's add-BOS/EOS/SEP flags
//! (llama-server's `format_prompt_rerank`); its score is the classifier's first output.

use std::sync::Mutex;

use base64::Engine as _;
use gguf_models::{Model, Pool, Pooling};
use gguf_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

use crate::api::Body;
use crate::Error;

/// The encoder side of a server: the model, its pooling and a compute pool used by one
/// request at a time.
pub struct Embedder {
    model: Box<dyn Model>,
    pool: Mutex<Pool>,
    /// The pooling every request gets.
    pub pooling: Pooling,
    /// Longest input in tokens (the training context).
    pub n_ctx: usize,
    rerank_template: Option<String>,
}

impl Embedder {
    /// Wraps `model` (which must be an encoder) with `pooling` (`None`: the file's).
    pub fn new(
        model: Box<dyn Model>,
        pooling: Option<Pooling>,
        n_threads: usize,
        rerank_template: Option<String>,
    ) -> Result<Embedder, Error> {
        let Some(enc) = model.encoder() else {
            return Err(Error::Invalid(format!("`{}` is not an embedding model", model.arch())));
        };
        let pooling = pooling.unwrap_or_else(|| enc.pooling());
        let n_ctx = model.n_ctx_train();
        Ok(Embedder { model, pool: Mutex::new(Pool::new(n_threads.max(1))), pooling, n_ctx, rerank_template })
    }

    /// The pooled (or per-token) outputs of `inputs`, one list per input.
    fn embed(&self, inputs: &[Vec<u32>], pooling: Pooling) -> Result<Vec<Vec<f32>>, Error> {
        let enc = self.model.encoder().ok_or_else(|| Error::Invalid("not an embedding model".into()))?;
        for (i, ids) in inputs.iter().enumerate() {
            if ids.is_empty() {
                return Err(Error::Invalid("Input content cannot be empty".into()));
            }
            if ids.len() > self.n_ctx {
                return Err(Error::ExceedContext {
                    message: format!(
                        "input {i} ({} tokens) is longer than the model's context ({} tokens)",
                        ids.len(),
                        self.n_ctx
                    ),
                    n_prompt_tokens: ids.len(),
                    n_ctx: self.n_ctx,
                });
            }
        }
        let seqs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        Ok(enc.embed(&pool, &seqs, pooling)?)
    }

    fn width(&self) -> usize {
        self.model.encoder().map_or(0, |e| e.n_embd_out())
    }
}

/// One input of `input` / `content`: a string, or a list of token ids (and strings:
/// llama-server's mixed prompts), tokenized with special tokens added and parsed.
fn tokenize_one(tok: &Tokenizer, v: &Value) -> Result<Vec<u32>, Error> {
    match v {
        Value::String(s) => Ok(tok.encode(s, true, true)?),
        Value::Array(items) => {
            let mut out = Vec::new();
            for it in items {
                match it {
                    Value::Number(n) => {
                        let id = n
                            .as_u64()
                            .filter(|&id| (id as usize) < tok.n_vocab())
                            .ok_or_else(|| Error::Invalid(format!("invalid token id {n}")))?;
                        out.push(id as u32);
                    }
                    Value::String(s) => out.extend(tok.encode(s, false, true)?),
                    other => {
                        return Err(Error::Invalid(format!("an input piece must be a string or token id, got {other}")))
                    }
                }
            }
            Ok(out)
        }
        other => Err(Error::Invalid(format!("an input must be a string or a list of token ids, got {other}"))),
    }
}

/// The inputs of a request (llama-server's `tokenize_input_prompts` shapes): a string, a
/// list of token ids, or a list of either.
fn tokenize_inputs(tok: &Tokenizer, v: &Value) -> Result<Vec<Vec<u32>>, Error> {
    match v {
        Value::Array(items) if items.iter().any(|x| !x.is_number()) => {
            items.iter().map(|x| tokenize_one(tok, x)).collect()
        }
        _ => Ok(vec![tokenize_one(tok, v)?]),
    }
}

/// `/embedding`, `/embeddings` (`oai` false) and `/v1/embeddings` (`oai` true).
pub fn embeddings_body(
    e: &Embedder,
    tok: &Tokenizer,
    model_id: &str,
    m: &Map<String, Value>,
    mut oai: bool,
) -> Result<Value, Error> {
    if oai && e.pooling == Pooling::None {
        return Err(Error::Invalid(
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type".into(),
        ));
    }
    if e.pooling == Pooling::Rank {
        return Err(Error::NotSupported(
            "this server runs a reranker (pooling `rank`): use /rerank, or start it with another --pooling".into(),
        ));
    }
    let b = Body(m);
    let input = match (b.get("input"), b.get("content")) {
        (Some(v), _) => v,
        (None, Some(v)) => {
            oai = false; // "content" is not OpenAI's field
            v
        }
        (None, None) => return Err(Error::Invalid("\"input\" or \"content\" must be provided".into())),
    };
    let base64 = match b.str("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return Err(Error::Invalid("The format to return the embeddings in. Can be either float or base64".into()))
        }
    };
    let norm = match b.i64("embd_normalize")? {
        Some(n) => i32::try_from(n).map_err(|_| Error::Invalid(format!("\"embd_normalize\" {n} is out of range")))?,
        None => 2,
    };
    let inputs = tokenize_inputs(tok, input)?;
    if inputs.is_empty() {
        return Err(Error::Invalid("\"input\" must not be empty".into()));
    }
    let outs = e.embed(&inputs, e.pooling)?;
    let width = e.width();
    // per input: the normalized pooled vector, or (pooling none) every token's, as is
    let vectors: Vec<Vec<Vec<f32>>> = outs
        .iter()
        .map(|v| {
            if e.pooling == Pooling::None {
                v.chunks(width).map(<[f32]>::to_vec).collect()
            } else {
                let mut o = vec![0f32; v.len()];
                gguf_models::normalize_embedding(v, &mut o, norm);
                vec![o]
            }
        })
        .collect();
    if !oai {
        let items: Vec<Value> = vectors.iter().enumerate().map(|(i, v)| json!({"index": i, "embedding": v})).collect();
        return Ok(Value::Array(items));
    }
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = &v[0];
            if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!({
                    "embedding": base64::engine::general_purpose::STANDARD.encode(bytes),
                    "index": i,
                    "object": "embedding",
                    "encoding_format": "base64",
                })
            } else {
                json!({"embedding": v, "index": i, "object": "embedding"})
            }
        })
        .collect();
    Ok(json!({
        "model": b.str("model")?.unwrap_or(model_id),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "data": data,
    }))
}

/// The tokens of one rerank pair (llama-server's `format_prompt_rerank`).
pub fn rerank_tokens(tok: &Tokenizer, template: Option<&str>, query: &str, doc: &str) -> Result<Vec<u32>, Error> {
    if let Some(t) = template {
        let prompt = t.replace("{query}", query).replace("{document}", doc);
        return Ok(tok.encode(&prompt, false, true)?);
    }
    let sp = tok.special_ids();
    let eos = sp.eos.or(sp.sep);
    let mut out = Vec::new();
    if tok.add_bos() {
        out.extend(sp.bos);
    }
    out.extend(tok.encode(query, false, false)?);
    if tok.add_eos() {
        out.extend(eos);
    }
    if tok.add_sep() {
        out.extend(sp.sep);
    }
    out.extend(tok.encode(doc, false, false)?);
    if tok.add_eos() {
        out.extend(eos);
    }
    Ok(out)
}

/// `/rerank` and its aliases.
pub fn rerank_body(e: &Embedder, tok: &Tokenizer, model_id: &str, m: &Map<String, Value>) -> Result<Value, Error> {
    if e.pooling != Pooling::Rank {
        return Err(Error::NotSupported(
            "This server does not support reranking. Start it with `--reranking` (a reranker model)".into(),
        ));
    }
    let b = Body(m);
    let tei = b.get("texts").is_some();
    let query = match b.get("query") {
        Some(Value::String(q)) => q.as_str(),
        Some(_) => return Err(Error::Invalid("\"query\" must be a string".into())),
        None => return Err(Error::Invalid("\"query\" must be provided".into())),
    };
    let docs = b.strings(if tei { "texts" } else { "documents" })?;
    if docs.is_empty() {
        return Err(Error::Invalid("\"documents\" must be a non-empty string array".into()));
    }
    let top_n = b.usize("top_n")?.unwrap_or(docs.len());
    let inputs: Vec<Vec<u32>> =
        docs.iter().map(|d| rerank_tokens(tok, e.rerank_template.as_deref(), query, d)).collect::<Result<_, _>>()?;
    let outs = e.embed(&inputs, Pooling::Rank)?;
    let label = if tei { "score" } else { "relevance_score" };
    let return_text = tei && b.bool("return_text")?.unwrap_or(false);
    let mut ranked: Vec<(usize, f32)> = outs.iter().enumerate().map(|(i, v)| (i, v[0])).collect();
    // llama-server's std::sort by score, descending (ties: not specified there; here by index)
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked.truncate(top_n);
    let results: Vec<Value> = ranked
        .iter()
        .map(|&(i, s)| {
            let mut o = Map::new();
            o.insert("index".into(), json!(i));
            o.insert(label.into(), json!(s));
            if return_text {
                o.insert("text".into(), json!(docs[i]));
            }
            Value::Object(o)
        })
        .collect();
    if tei {
        return Ok(Value::Array(results));
    }
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    Ok(json!({
        "model": b.str("model")?.unwrap_or(model_id),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    }))
}
