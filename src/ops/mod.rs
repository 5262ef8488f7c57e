//! Operator tools over a namespace's stores, one module each: [`lag`] (`unread lag`), [`rebuild`]
//! (`unread projection rebuild`), [`inspect`] (`unread inspect`) and [`verify`] (`unread verify`, also run in the
//! background by `unread run --verify-every`). Each returns a report that formats itself ([`std::fmt::Display`]).

pub mod inspect;
pub mod lag;
pub mod rebuild;
pub mod verify;
