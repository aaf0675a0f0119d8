//! Tokenizers rebuilt from GGUF metadata (BPE, SentencePiece, WordPiece, UGM) and chat
//! templates. Filled by the tokenizer issue.
#![deny(missing_docs)]
