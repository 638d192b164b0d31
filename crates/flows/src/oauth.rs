//! Credentials towards upstreams (SPEC §20): the OAuth client of `oncerpc-mcp-upstream`
//! ([`TokenSource`]), shared by HTTP steps (`[upstream.oauth]`, a step's own `oauth`) and MCP
//! upstreams, so that one token cache serves both.

pub use oncerpc_mcp_upstream::oauth::{OAuthClient, TokenSource};
