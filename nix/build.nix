# The workspace as Nix derivations (crane): the yarilo package with its
# `yarilo-<component>` links, the OCI image with the same contents and
# labels as images/build's, and the flake's Rust checks.
{ pkgs, craneLib, version, revision, source, licence }:
let
  inherit (pkgs) lib;

  # Cargo's inputs plus the non-Rust files the crates read at build or test
  # time (embedded YAML defaults, fixtures), nothing else of the checkout.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../clippy.toml
      ../rustfmt.toml
      ../.config
      ../crates
      (lib.fileset.maybeMissing ../deny.toml)
    ];
  };

  commonArgs = {
    inherit src version;
    pname = "yarilo";
    strictDeps = true;
    cargoExtraArgs = "--locked";
  };

  cargoArtifacts = craneLib.buildDepsOnly commonArgs;

  canRunBuilt = pkgs.stdenv.buildPlatform.canExecute pkgs.stdenv.hostPlatform;

  yarilo = craneLib.buildPackage (commonArgs // {
    inherit cargoArtifacts;
    cargoExtraArgs = "--locked -p yarilo -p yarctl";
    # The flake's checks run the test suite.
    doCheck = false;
    # One link per component the binary lists (crates/yarilo/src/dispatch.rs).
    postInstall = lib.optionalString canRunBuilt ''
      for component in $("$out/bin/yarilo" links); do
        ln -s yarilo "$out/bin/yarilo-$component"
      done
    '';
    meta = {
      description = "Clustered mail server (IMAP, POP3, LMTP, Submission) on Dovecot's director model";
      homepage = source;
      license = with lib.licenses; [ asl20 mit ];
      mainProgram = "yarilo";
      platforms = lib.platforms.linux;
    };
  });

  # The same as images/build's yarilo image: binaries and links, CA
  # certificates, the service user, the default configuration and the data
  # volume; no shell. Paths differ where Nix lays them out (/bin, the CA
  # bundle's name); commands are found through PATH either way.
  ports = [ 1143 1993 1110 1995 2424 1587 1465 9090 ];
  labels = {
    "org.opencontainers.image.title" = "yarilo";
    "org.opencontainers.image.description" = "yarilo mail server: every component, yarctl";
    "org.opencontainers.image.version" = version;
    "org.opencontainers.image.revision" = revision;
    "org.opencontainers.image.source" = source;
    "org.opencontainers.image.licenses" = licence;
  };
  image = pkgs.dockerTools.streamLayeredImage {
    name = "yarilo";
    tag = version;
    contents = [ yarilo pkgs.cacert ];
    extraCommands = ''
      mkdir -p etc/yarilo tmp
      chmod 1777 tmp
      cp ${../images/yarilo/yarilo.yaml} etc/yarilo/yarilo.yaml
      printf 'root:x:0:0:root:/root:/sbin/nologin\nyarilo:x:10000:10000:yarilo:/var/lib/yarilo:/sbin/nologin\n' > etc/passwd
      printf 'root:x:0:\nyarilo:x:10000:\n' > etc/group
      printf 'passwd: files\ngroup: files\nhosts: files dns\n' > etc/nsswitch.conf
    '';
    fakeRootCommands = ''
      mkdir -p var/lib/yarilo
      chown 10000:10000 var/lib/yarilo
      chmod 0700 var/lib/yarilo
    '';
    config = {
      User = "10000:10000";
      Cmd = [ "yarilo" "single" ];
      Env = [
        "PATH=/bin"
        "YARILO_CONFIG=/etc/yarilo/yarilo.yaml"
        "SSL_CERT_FILE=${pkgs.cacert}/etc/ssl/certs/ca-bundle.crt"
      ];
      WorkingDir = "/var/lib/yarilo";
      Volumes."/var/lib/yarilo" = { };
      ExposedPorts = lib.genAttrs (map (p: "${toString p}/tcp") ports) (_: { });
      StopSignal = "SIGTERM";
      Labels = labels;
    };
  };

  # The suite as scripts/test runs it, less what needs a Docker engine or
  # the network (the packaging tests); the servers the tests start are
  # native inputs.
  python = pkgs.python3.withPackages (ps: with ps; [ aiosmtpd imapclient prometheus-client scramp ]);
  checks = {
    inherit yarilo;
    yarilo-fmt = craneLib.cargoFmt { inherit src version; pname = "yarilo"; };
    yarilo-clippy = craneLib.cargoClippy (commonArgs // {
      inherit cargoArtifacts;
      cargoClippyExtraArgs = "--workspace --all-targets -- -D warnings";
    });
    yarilo-deny = craneLib.cargoDeny {
      inherit src version;
      pname = "yarilo";
      # The advisory database needs the network; bans, licences and sources
      # do not.
      cargoDenyChecks = "bans licenses sources";
    };
    yarilo-nextest = craneLib.cargoNextest (commonArgs // {
      inherit cargoArtifacts;
      # The sandbox has no Docker engine and no Helm schemas: the image,
      # Compose, lab and chart tests run in scripts/test instead.
      cargoNextestExtraArgs = "--workspace --exclude yarilo-packaging-tests --no-fail-fast -E 'not (binary(docker_smoke) | binary(helm))'";
      nativeCheckInputs = with pkgs; [
        curl
        dovecot
        fetchmail
        isync
        jq
        mariadb
        postgresql
        procps
        python
        redis
        sqlite
        swaks
      ];
    });
  };
in
{
  inherit yarilo image checks;
}
