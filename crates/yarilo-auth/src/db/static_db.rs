//! The static driver: fields from a template in `args`, the same for every
//! user after `%` expansion. As a userdb it answers for anyone (typical for
//! one virtual domain: `uid=vmail gid=vmail home=/srv/mail/%d/%n`); as a
//! passdb it needs `password=` or `nopassword`.

use super::{parse_password, DbError, LookupRequest, PassdbEntry};
use crate::fields::ExtraFields;
use crate::scheme::Scheme;
use crate::template::expand;

#[derive(Debug, Clone)]
pub struct StaticDb {
    template: ExtraFields,
    default_scheme: Scheme,
}

impl StaticDb {
    pub fn new(args: &str, default_scheme: Scheme) -> StaticDb {
        StaticDb {
            template: ExtraFields::parse_dovecot(args),
            default_scheme,
        }
    }

    fn expanded(&self, req: &LookupRequest<'_>) -> ExtraFields {
        let vars = req.vars();
        self.template
            .iter()
            .map(|(k, v)| (k.to_string(), expand(v, &vars)))
            .collect()
    }

    pub fn passdb_lookup(&self, req: &LookupRequest<'_>) -> Result<Option<PassdbEntry>, DbError> {
        let mut fields = self.expanded(req);
        let password = fields.remove("password");
        let nopassword = fields.remove("nopassword").is_some();
        if password.is_none() && !nopassword {
            return Err(DbError::Unsupported(
                "static passdb needs password= or nopassword in args".into(),
            ));
        }
        let password = password
            .map(|p| parse_password(req.user, &p, self.default_scheme))
            .transpose()?;
        let (fields, userdb_fields) = fields.split_userdb();
        Ok(Some(PassdbEntry {
            user: req.user.to_string(),
            password,
            nopassword,
            fields,
            userdb_fields,
        }))
    }

    pub fn userdb_fields(&self, req: &LookupRequest<'_>) -> ExtraFields {
        self.expanded(req)
    }
}
