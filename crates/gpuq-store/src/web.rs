//! The dashboard's login links and browser sessions (migration 8). Secrets are
//! stored as hashes only; every lookup compares against a hash, so a copy of
//! the database logs nobody in.

use super::{Result, Store};
use gpuq_core::Millis;
use rusqlite::{params, OptionalExtension};

/// A live browser session, as the auth layer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    pub user: String,
    /// Sent by the page with every request (a header a cross-site page cannot set).
    pub csrf: String,
    pub expires_at: Millis,
}

impl Store {
    /// Records a login link's code (hashed) for `user`, valid until
    /// `expires_at`; `token_id`: the API token that asked for it. Refused
    /// (`None`) when `user` already has `max_live` links not yet used or
    /// expired; expired links are swept on the way.
    pub fn create_web_link(
        &mut self,
        code_hash: &[u8],
        user: &str,
        token_id: Option<i64>,
        expires_at: Millis,
        now: Millis,
        max_live: u32,
    ) -> Result<Option<()>> {
        self.write(|tx| {
            tx.execute("DELETE FROM web_links WHERE expires_at <= ?1", [now])?;
            let live: u32 = tx.query_row("SELECT COUNT(*) FROM web_links WHERE user = ?1", [user], |r| r.get(0))?;
            if live >= max_live {
                return Ok(None);
            }
            tx.execute(
                "INSERT INTO web_links (code_hash, user, token_id, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![code_hash, user, token_id, expires_at],
            )?;
            Ok(Some(()))
        })
    }

    /// Whose a login link is, without using it up (the login page asks before it logs in).
    pub fn web_link_user(&self, code_hash: &[u8], now: Millis) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT user FROM web_links WHERE code_hash = ?1 AND expires_at > ?2",
                params![code_hash, now],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Uses up a login link: its user and the token that asked for it, when
    /// the code is known and not expired. The row goes in the same
    /// transaction, so a code works once however many browsers race for it.
    pub fn redeem_web_link(
        &mut self,
        code_hash: &[u8],
        now: Millis,
    ) -> Result<Option<(String, Option<i64>)>> {
        self.write(|tx| {
            let link: Option<(String, Option<i64>, Millis)> = tx
                .query_row(
                    "SELECT user, token_id, expires_at FROM web_links WHERE code_hash = ?1",
                    [code_hash],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            tx.execute(
                "DELETE FROM web_links WHERE code_hash = ?1 OR expires_at <= ?2",
                params![code_hash, now],
            )?;
            Ok(link
                .filter(|(_, _, expires)| *expires > now)
                .map(|(u, t, _)| (u, t)))
        })
    }

    /// Stores a new session (its id hashed); `token_id`: the API token it was made with.
    pub fn create_web_session(
        &mut self,
        id_hash: &[u8],
        session: &WebSession,
        token_id: Option<i64>,
        now: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute("DELETE FROM web_sessions WHERE expires_at <= ?1", [now])?;
            tx.execute(
                "INSERT INTO web_sessions (id_hash, user, csrf, token_id, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id_hash,
                    session.user,
                    session.csrf,
                    token_id,
                    now,
                    session.expires_at
                ],
            )?;
            Ok(())
        })
    }

    /// The session with this id, unless it expired or its token was revoked.
    pub fn web_session(&self, id_hash: &[u8], now: Millis) -> Result<Option<WebSession>> {
        Ok(self
            .conn
            .query_row(
                "SELECT s.user, s.csrf, s.expires_at FROM web_sessions s \
                 LEFT JOIN tokens t ON t.id = s.token_id \
                 WHERE s.id_hash = ?1 AND s.expires_at > ?2 \
                   AND (s.token_id IS NULL OR (t.id IS NOT NULL AND t.revoked_at IS NULL))",
                params![id_hash, now],
                |r| {
                    Ok(WebSession {
                        user: r.get(0)?,
                        csrf: r.get(1)?,
                        expires_at: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// Ends every session of `user` (every session at all with `None`); how many.
    pub fn end_web_sessions(&mut self, user: Option<&str>) -> Result<usize> {
        self.write(|tx| {
            Ok(match user {
                Some(u) => tx.execute("DELETE FROM web_sessions WHERE user = ?1", [u])?,
                None => tx.execute("DELETE FROM web_sessions", [])?,
            })
        })
    }

    /// Ends a session (logout); false when there was none.
    pub fn delete_web_session(&mut self, id_hash: &[u8]) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute("DELETE FROM web_sessions WHERE id_hash = ?1", [id_hash])? > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::open_in_memory().unwrap()
    }

    #[test]
    fn a_link_works_once_and_not_after_it_expires() {
        let mut s = store();
        let token = s.create_token("bo", b"hash-bo", 0).unwrap();
        assert!(s
            .create_web_link(b"code-a", "ana", None, 1_000, 0, 5)
            .unwrap()
            .is_some());
        assert!(s
            .create_web_link(b"code-b", "bo", Some(token), 1_000, 0, 5)
            .unwrap()
            .is_some());
        assert_eq!(
            s.web_link_user(b"code-a", 10).unwrap().as_deref(),
            Some("ana")
        );
        assert_eq!(
            s.redeem_web_link(b"code-a", 999).unwrap(),
            Some(("ana".into(), None))
        );
        assert_eq!(
            s.redeem_web_link(b"code-a", 999).unwrap(),
            None,
            "single use"
        );
        assert_eq!(s.web_link_user(b"code-a", 10).unwrap(), None);
        assert_eq!(s.web_link_user(b"code-b", 1_000).unwrap(), None, "expired");
        assert_eq!(
            s.redeem_web_link(b"code-b", 1_000).unwrap(),
            None,
            "expired"
        );
        assert_eq!(s.redeem_web_link(b"nope", 10).unwrap(), None);
    }

    #[test]
    fn a_user_has_few_live_links_and_expired_ones_are_swept() {
        let mut s = store();
        for i in 0..3u8 {
            assert!(s
                .create_web_link(&[i], "ana", None, 1_000, 0, 3)
                .unwrap()
                .is_some());
        }
        assert!(
            s.create_web_link(b"x", "ana", None, 1_000, 0, 3)
                .unwrap()
                .is_none(),
            "capped"
        );
        assert!(
            s.create_web_link(b"y", "bo", None, 1_000, 0, 3)
                .unwrap()
                .is_some(),
            "per user"
        );
        assert!(
            s.create_web_link(b"z", "ana", None, 5_000, 1_000, 3)
                .unwrap()
                .is_some(),
            "the old ones expired"
        );
    }

    #[test]
    fn sessions_expire_end_at_logout_and_die_with_their_token() {
        let mut s = store();
        let session = |user: &str| WebSession {
            user: user.into(),
            csrf: "c".into(),
            expires_at: 5_000,
        };
        let token = s.create_token("bo", b"hash-bo", 0).unwrap();
        s.create_web_session(b"s-ana", &session("ana"), None, 0)
            .unwrap();
        s.create_web_session(b"s-bo", &session("bo"), Some(token), 0)
            .unwrap();
        assert_eq!(
            s.web_session(b"s-ana", 4_999).unwrap(),
            Some(session("ana"))
        );
        assert_eq!(s.web_session(b"s-ana", 5_000).unwrap(), None, "expired");
        assert!(s.web_session(b"s-bo", 10).unwrap().is_some());
        s.revoke_token(token, 20).unwrap();
        assert_eq!(s.web_session(b"s-bo", 30).unwrap(), None, "token revoked");
        assert!(s.delete_web_session(b"s-ana").unwrap());
        assert_eq!(s.web_session(b"s-ana", 10).unwrap(), None);
        assert!(!s.delete_web_session(b"s-ana").unwrap());
        for id in [&b"a1"[..], b"a2", b"c1"] {
            let user = if id[0] == b'a' { "ana" } else { "cy" };
            s.create_web_session(id, &session(user), None, 0).unwrap();
        }
        assert_eq!(s.end_web_sessions(Some("ana")).unwrap(), 2);
        assert!(s.web_session(b"c1", 10).unwrap().is_some());
        assert_eq!(
            s.end_web_sessions(None).unwrap(),
            2,
            "cy's and bo's (dead, still stored)"
        );
    }
}
