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
    /// Records a login link's code (hashed) for `user`, valid until `expires_at`.
    pub fn create_web_link(
        &mut self,
        code_hash: &[u8],
        user: &str,
        expires_at: Millis,
    ) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO web_links (code_hash, user, expires_at) VALUES (?1, ?2, ?3)",
                params![code_hash, user, expires_at],
            )?;
            Ok(())
        })
    }

    /// Uses up a login link: its user when the code is known and not expired.
    /// The row goes in the same transaction, so a code works once however many
    /// browsers race for it; expired links are swept on the way.
    pub fn redeem_web_link(&mut self, code_hash: &[u8], now: Millis) -> Result<Option<String>> {
        self.write(|tx| {
            let user: Option<(String, Millis)> = tx
                .query_row(
                    "SELECT user, expires_at FROM web_links WHERE code_hash = ?1",
                    [code_hash],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            tx.execute(
                "DELETE FROM web_links WHERE code_hash = ?1 OR expires_at <= ?2",
                params![code_hash, now],
            )?;
            Ok(user.filter(|(_, expires)| *expires > now).map(|(u, _)| u))
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
        s.create_web_link(b"code-a", "ana", 1_000).unwrap();
        s.create_web_link(b"code-b", "bo", 1_000).unwrap();
        assert_eq!(
            s.redeem_web_link(b"code-a", 999).unwrap().as_deref(),
            Some("ana")
        );
        assert_eq!(
            s.redeem_web_link(b"code-a", 999).unwrap(),
            None,
            "single use"
        );
        assert_eq!(
            s.redeem_web_link(b"code-b", 1_000).unwrap(),
            None,
            "expired"
        );
        assert_eq!(s.redeem_web_link(b"nope", 10).unwrap(), None);
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
    }
}
