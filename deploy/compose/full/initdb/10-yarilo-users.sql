-- The users table yarilo's default SQL queries read and write (the same as
-- `yarctl user init-db` creates). Run once by the mariadb image when it
-- initialises an empty data volume.
CREATE TABLE IF NOT EXISTS users (
  username VARCHAR(255) NOT NULL PRIMARY KEY,
  password VARCHAR(255) NOT NULL,
  home VARCHAR(255),
  uid INTEGER,
  gid INTEGER
);
