//! Who is asking, without passwords: over the unix socket the kernel says
//! (SO_PEERCRED); over TCP a bearer token does (the daemon's own token, or a
//! per-user token stored hashed). And which local account a job runs as.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::ffi::{CStr, CString};

/// The identity a request acts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub user: String,
    /// May act on every job (root, the daemon's own user, configured admins).
    pub admin: bool,
    /// Is the daemon's own account (its token, or its uid on the socket): the only
    /// caller who may submit for, or make a token for, another account. A
    /// configured admin manages the queue but never acts as someone else.
    pub owner: bool,
}

pub struct Identity {
    /// The account the daemon runs as.
    pub owner: String,
    pub owner_uid: u32,
    admins: HashSet<String>,
    single_user: bool,
    allow_root_jobs: bool,
    min_job_uid: u32,
    config_path: String,
}

/// What the config says about who jobs may run as.
pub struct AccountRules<'a> {
    pub admins: &'a [String],
    pub single_user: bool,
    pub allow_root_jobs: bool,
    pub min_job_uid: u32,
    pub config_path: &'a std::path::Path,
}

impl Identity {
    pub fn new(rules: AccountRules<'_>) -> Self {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        Self {
            owner: user_name(uid),
            owner_uid: uid,
            admins: rules.admins.iter().cloned().collect(),
            single_user: rules.single_user,
            allow_root_jobs: rules.allow_root_jobs,
            min_job_uid: rules.min_job_uid,
            config_path: rules.config_path.display().to_string(),
        }
    }

    pub fn is_admin(&self, user: &str) -> bool {
        user == self.owner || user == "root" || self.admins.contains(user)
    }

    /// A caller known by name (a per-user token, a schedule's user).
    pub fn caller(&self, user: String) -> Caller {
        let admin = self.is_admin(&user);
        Caller {
            user,
            admin,
            owner: false,
        }
    }

    /// A unix-socket peer, as the kernel names it.
    pub fn peer(&self, uid: u32) -> Caller {
        Caller {
            owner: uid == self.owner_uid,
            ..self.caller(user_name(uid))
        }
    }

    /// The holder of the daemon's own token.
    pub fn owner_caller(&self) -> Caller {
        Caller {
            user: self.owner.clone(),
            admin: true,
            owner: true,
        }
    }

    /// A daemon run as root serves every local user and runs their jobs as them.
    pub fn multi_user(&self) -> bool {
        self.owner_uid == 0 && !self.single_user
    }

    /// May `caller` name `user` as a job's user or a token's? Everyone may name
    /// themselves; only the owner names another account (where names are
    /// accounts), and admins may name labels (a daemon whose jobs all run as itself).
    pub fn may_act_for(&self, caller: &Caller, user: &str) -> bool {
        user == caller.user || caller.owner || (caller.admin && !self.multi_user())
    }

    /// The account a job of `user` runs as (`None`: the daemon's own), or why no
    /// job of `user` may run. Checked at submit, at token creation and again at
    /// every launch: a job never runs as uid 0 unless the config allows it.
    pub fn job_account(&self, user: &str) -> Result<Option<gpuq_exec::RunAs>, String> {
        if !self.multi_user() {
            if self.owner_uid == 0 && !self.allow_root_jobs {
                return Err(format!(
                    "this daemon runs as root with every job as its own user, so jobs would run as root \
                     (user {user}); run the daemon as a normal user, or put `allow_root_jobs = true` in \
                     {} (root-owned) and restart it (`gpuq server stop`)",
                    self.config_path
                ));
            }
            return Ok(None);
        }
        let account = account(user)
            .ok_or_else(|| format!("{user} has no account on this node; jobs run as their user"))?;
        if account.uid == 0 {
            if !self.allow_root_jobs {
                return Err(format!(
                    "jobs do not run as root (uid 0, user {user}): submit as a normal user, or put \
                     `allow_root_jobs = true` in {} (root-owned) and restart the daemon (`gpuq server stop`)",
                    self.config_path
                ));
            }
        } else if account.uid < self.min_job_uid {
            return Err(format!(
                "{user} is a system account (uid {} is below min_job_uid = {}); jobs run as people's accounts",
                account.uid, self.min_job_uid
            ));
        }
        Ok((account.uid != self.owner_uid).then_some(account))
    }
}

/// A new API token: 32 random bytes, hex, with a prefix that makes it recognisable in a leak scan.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| format!("no randomness for a token: {e}"))?;
    Ok(format!(
        "gpuq_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

pub fn hash_token(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Compares without an early exit, so timing does not reveal how much of a guess was right.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The login name of a uid ("uid1234" when it has none).
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: getpwuid_r writes into our buffer and struct; we copy the name out before they drop.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) == 0
            && !out.is_null()
        {
            if let Ok(name) = CStr::from_ptr(pw.pw_name).to_str() {
                return name.to_string();
            }
        }
    }
    format!("uid{uid}")
}

/// The id of a local group.
pub fn group_id(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: getgrnam_r writes into our buffer and struct; we copy the id out.
    unsafe {
        let mut gr: libc::group = std::mem::zeroed();
        let mut out: *mut libc::group = std::ptr::null_mut();
        if libc::getgrnam_r(
            cname.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        ) != 0
            || out.is_null()
        {
            return None;
        }
        Some(gr.gr_gid)
    }
}

/// Looks up a user by name, with its supplementary groups.
pub fn account(name: &str) -> Option<gpuq_exec::RunAs> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: as in `user_name`; getgrouplist fills a buffer we size and own.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        if libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        ) != 0
            || out.is_null()
        {
            return None;
        }
        let home = CStr::from_ptr(pw.pw_dir).to_string_lossy().into_owned();
        let mut n: libc::c_int = 64;
        let mut groups = vec![0 as libc::gid_t; n as usize];
        if libc::getgrouplist(cname.as_ptr(), pw.pw_gid, groups.as_mut_ptr(), &mut n) < 0 {
            groups.resize(n.max(0) as usize, 0);
            libc::getgrouplist(cname.as_ptr(), pw.pw_gid, groups.as_mut_ptr(), &mut n);
        }
        groups.truncate(n.max(0) as usize);
        Some(gpuq_exec::RunAs {
            name: name.to_string(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
            groups,
            home,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashes_stable() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with("gpuq_") && a.len() == 69);
        assert_eq!(hash_token(&a), hash_token(&a));
        assert!(constant_time_eq(&hash_token(&a), &hash_token(&a)));
        assert!(!constant_time_eq(&hash_token(&a), &hash_token(&b)));
    }

    #[test]
    fn root_resolves() {
        assert_eq!(user_name(0), "root");
        let root = account("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(account("no-such-user-gpuq").is_none());
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-gpuq"), None);
    }
}
