//! The crate's error, and its OpenAI-style HTTP form (`{"error": {"code", "message",
//! "type"}}` with llama-server's types and status codes).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Everything that can go wrong in the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading or running the model.
    #[error(transparent)]
    Model(#[from] gguf_models::Error),
    /// Tokenizing or rendering a chat template.
    #[error(transparent)]
    Tokenizer(#[from] gguf_tokenizer::Error),
    /// Reading the model file.
    #[error(transparent)]
    Format(#[from] gguf_format::Error),
    /// Sockets, threads, files.
    #[error("{0}")]
    Io(String),
    /// A bad request (400).
    #[error("{0}")]
    Invalid(String),
    /// The prompt does not fit the context (400, with llama-server's extra fields).
    #[error("{message}")]
    ExceedContext {
        /// The message.
        message: String,
        /// Prompt tokens.
        n_prompt_tokens: usize,
        /// Context of a slot.
        n_ctx: usize,
    },
    /// A missing or wrong API key (401).
    #[error("{0}")]
    Auth(String),
    /// No such endpoint (404).
    #[error("{0}")]
    NotFound(String),
    /// A request body over the limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// A feature this server does not have (501).
    #[error("{0}")]
    NotSupported(String),
    /// Loading, shutting down, or the queue is full (503).
    #[error("{0}")]
    Unavailable(String),
}

impl Error {
    /// HTTP status and llama-server's error type.
    pub fn status(&self) -> (StatusCode, &'static str) {
        match self {
            Error::Invalid(_) | Error::Tokenizer(_) => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            Error::ExceedContext { .. } => (StatusCode::BAD_REQUEST, "exceed_context_size_error"),
            Error::Auth(_) => (StatusCode::UNAUTHORIZED, "authentication_error"),
            Error::NotFound(_) => (StatusCode::NOT_FOUND, "not_found_error"),
            Error::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error"),
            Error::NotSupported(_) => (StatusCode::NOT_IMPLEMENTED, "not_supported_error"),
            Error::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable_error"),
            Error::Model(_) | Error::Format(_) | Error::Io(_) => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        }
    }

    /// The `error` object.
    pub fn to_json(&self) -> serde_json::Value {
        let (code, ty) = self.status();
        let mut v = serde_json::json!({"code": code.as_u16(), "message": self.to_string(), "type": ty});
        if let Error::ExceedContext { n_prompt_tokens, n_ctx, .. } = self {
            v["n_prompt_tokens"] = (*n_prompt_tokens).into();
            v["n_ctx"] = (*n_ctx).into();
        }
        v
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (code, _) = self.status();
        (code, axum::Json(serde_json::json!({ "error": self.to_json() }))).into_response()
    }
}
