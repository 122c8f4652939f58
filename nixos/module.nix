# services.yarilo: yarilo on NixOS hosts without Kubernetes.
#
# One hardened systemd unit per enabled component (yarilo-<component>),
# each running `yarilo <component>` on its own rendered yarilo.yaml:
# services.yarilo.settings with the component's own settings merged over
# it, checked with `yarilo config check` when the system is built. Options
# are documented in docs/nixos.md.
{ config, lib, pkgs, ... }:

let
  cfg = config.services.yarilo;
  format = pkgs.formats.yaml { };

  inherit (lib)
    concatMap
    concatStringsSep
    attrNames
    filter
    filterAttrs
    literalExpression
    mapAttrs'
    mapAttrsToList
    mkEnableOption
    mkIf
    mkOption
    mkPackageOption
    nameValuePair
    optional
    optionalAttrs
    recursiveUpdate
    types
    unique
    ;

  # Every component the module knows: the client-facing services.<name>
  # entries it binds (for openFirewall and the port capability) and a
  # telemetry port of its own, so that several components share a host. A
  # new component is one line here.
  components = {
    single = { services = [ "imap" "imaps" "pop3" "pop3s" "lmtp" "submission" "submissions" ]; telemetry = 9090; };
    auth = { services = [ ]; telemetry = 9190; };
    locks = { services = [ ]; telemetry = 9191; };
    warden = { services = [ ]; telemetry = 9192; };
    director = { services = [ ]; telemetry = 9193; };
    backend-reg = { services = [ ]; telemetry = 9194; };
    imap = { services = [ "imap" ]; telemetry = 9195; };
    imap-login = { services = [ "imap" "imaps" ]; telemetry = 9196; };
    pop3 = { services = [ "pop3" ]; telemetry = 9197; };
    pop3-login = { services = [ "pop3" "pop3s" ]; telemetry = 9198; };
    submission = { services = [ "submission" ]; telemetry = 9199; };
    submission-login = { services = [ "submission" "submissions" ]; telemetry = 9200; };
    lmtp = { services = [ "lmtp" ]; telemetry = 9201; };
    lmtp-login = { services = [ "lmtp" ]; telemetry = 9202; };
    quota-status = { services = [ ]; telemetry = 9203; };
  };

  # yarilo-config's default port of each services.<name> entry.
  defaultPorts = {
    imap = 143;
    imaps = 993;
    pop3 = 110;
    pop3s = 995;
    lmtp = 24;
    submission = 587;
    submissions = 465;
    managesieve = 4190;
    jmap = 8080;
  };

  enabled = filterAttrs (_: c: c.enable) cfg.components;

  # What one component reads: its telemetry port, then the shared
  # settings, then its own.
  componentSettings = name: c:
    recursiveUpdate
      (recursiveUpdate
        { telemetry.listen = ":${toString components.${name}.telemetry}"; }
        cfg.settings)
      c.settings;

  # The client ports a component binds (enabled entries only).
  componentPorts = name: c:
    let
      s = componentSettings name c;
      entry = svc: (s.services or { }).${svc} or { };
    in
    concatMap
      (svc: optional ((entry svc).enabled or true) ((entry svc).port or defaultPorts.${svc}))
      (components.${name}.services or [ ]);

  checkedConfig = name: file:
    if !cfg.checkConfig then file else
    pkgs.runCommand "yarilo-${name}.yaml"
      {
        nativeBuildInputs = [ cfg.package ];
        preferLocalBuild = true;
      }
      ''
        # Secrets are not available at build time: the check reads each
        # credential's checkValue instead.
        mkdir creds
        ${concatStringsSep "\n" (mapAttrsToList
          (n: s: "printf '%s' ${lib.escapeShellArg s.checkValue} > creds/${lib.escapeShellArg n}")
          cfg.secrets)}
        CREDENTIALS_DIRECTORY="$PWD/creds" yarilo config check --config ${file}
        cp ${file} "$out"
      '';

  configFile = name: c:
    checkedConfig name (format.generate "yarilo-${name}.yaml" (componentSettings name c));

  unit = name: c:
    let
      ports = componentPorts name c;
      privileged = lib.any (p: p < 1024) ports;
      # An empty string clears the set (an empty list would render no line
      # and leave systemd's full default).
      capabilities = if privileged then "CAP_NET_BIND_SERVICE" else "";
      grace = (cfg.settings.general or { }).shutdown_grace_seconds or 10;
    in
    nameValuePair "yarilo-${name}" {
      description = "yarilo ${name}";
      documentation = [ "https://example.invalid/yarilo/docs/components.md" ];
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      restartTriggers = [ (configFile name c) ];
      serviceConfig = {
        ExecStart = "${lib.getExe cfg.package} ${name} --config ${configFile name c}";
        User = cfg.user;
        Group = cfg.group;
        WorkingDirectory = cfg.dataDir;
        ReadWritePaths = [ cfg.dataDir ];
        LoadCredential = mapAttrsToList (n: s: "${n}:${s.file}") cfg.secrets;
        Restart = "on-failure";
        RestartSec = "2s";
        TimeoutStopSec = grace + 10;
        LimitNOFILE = 65535;
        UMask = "0077";

        AmbientCapabilities = capabilities;
        CapabilityBoundingSet = capabilities;
        NoNewPrivileges = true;
        ProtectSystem = "strict";
        ProtectHome = true;
        PrivateTmp = true;
        PrivateDevices = true;
        DevicePolicy = "closed";
        ProtectClock = true;
        ProtectHostname = true;
        ProtectKernelLogs = true;
        ProtectKernelModules = true;
        ProtectKernelTunables = true;
        ProtectControlGroups = true;
        ProtectProc = "invisible";
        ProcSubset = "pid";
        RestrictAddressFamilies = [ "AF_INET" "AF_INET6" "AF_UNIX" ];
        RestrictNamespaces = true;
        RestrictRealtime = true;
        RestrictSUIDSGID = true;
        RemoveIPC = true;
        LockPersonality = true;
        MemoryDenyWriteExecute = true;
        SystemCallArchitectures = "native";
        SystemCallFilter = [ "@system-service" "~@privileged" "~@resources" ];
      } // optionalAttrs (cfg.dataDir == "/var/lib/yarilo") {
        StateDirectory = "yarilo";
        StateDirectoryMode = "0700";
      } // optionalAttrs (name == "single") {
        # SIGHUP reloads the TLS certificates.
        ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
      };
    };
in
{
  options.services.yarilo = {
    enable = mkEnableOption "yarilo, a clustered mail server";

    package = mkPackageOption pkgs "yarilo" { };

    user = mkOption {
      type = types.str;
      default = "yarilo";
      description = "User every component runs as (created when left at the default).";
    };

    group = mkOption {
      type = types.str;
      default = "yarilo";
      description = "Group every component runs as (created when left at the default).";
    };

    dataDir = mkOption {
      type = types.path;
      default = "/var/lib/yarilo";
      description = ''
        Data directory (`general.data_dir`): mail, the passwd-file, generated
        certificates. The only path the units may write. The default is a
        systemd StateDirectory; another path must exist and belong to
        {option}`services.yarilo.user`.
      '';
    };

    settings = mkOption {
      type = types.submodule {
        freeformType = format.type;
        options.general.data_dir = mkOption {
          type = types.str;
          default = cfg.dataDir;
          defaultText = literalExpression "config.services.yarilo.dataDir";
          description = "Where mail and state live; follows {option}`services.yarilo.dataDir`.";
        };
      };
      default = { };
      example = literalExpression ''
        {
          services.imap.port = 143;
          passdb = [{ driver = "sql"; connect = "credential:sql-url"; }];
          userdb = [{ driver = "sql"; connect = "credential:sql-url"; }];
        }
      '';
      description = ''
        yarilo.yaml shared by every component (keys as in
        docs/configuration.md). Rendered to the Nix store and checked with
        `yarilo config check` at build time, so secrets never belong here:
        write `credential:NAME` and declare NAME in
        {option}`services.yarilo.secrets`. Also installed as
        /etc/yarilo/yarilo.yaml for yarctl.
      '';
    };

    components = mkOption {
      type = types.attrsOf (types.submodule ({ name, ... }: {
        options = {
          enable = mkEnableOption "the yarilo ${name} component (unit yarilo-${name}.service)";
          settings = mkOption {
            inherit (format) type;
            default = { };
            example = literalExpression ''{ services.imap.port = 10143; }'';
            description = ''
              Settings of this component only, merged over
              {option}`services.yarilo.settings` (a backend's port, a
              login's backend address).
            '';
          };
        };
      }));
      default = { };
      example = literalExpression ''
        {
          single.enable = true;
        }
      '';
      description = ''
        Components to run, one unit each: `single` alone for the one-process
        shape; `auth`, `locks`, `warden`, the protocol backends (`imap`,
        `pop3`, `submission`, `lmtp`) and their logins (`imap-login`, …)
        for the standalone shape; add `director` and `backend-reg` for the
        director shape. Each listens for telemetry on a port of its own
        (docs/nixos.md) unless its settings say otherwise.
      '';
    };

    secrets = mkOption {
      type = types.attrsOf (types.submodule {
        options = {
          file = mkOption {
            type = types.str;
            example = "/run/keys/yarilo-sql-url";
            description = ''
              File holding the secret, outside the Nix store, readable by
              root. systemd hands it to every component as the credential
              of the attribute's name (`LoadCredential=`).
            '';
          };
          checkValue = mkOption {
            type = types.str;
            default = "placeholder";
            example = "mysql://yarilo:x@db/yarilo";
            description = ''
              What the build-time `yarilo config check` reads in place of
              the secret (the file is not there at build time). Give it the
              secret's shape where the key is checked, e.g. a URL.
            '';
          };
        };
      });
      default = { };
      example = literalExpression ''
        { sql-url = { file = "/run/keys/yarilo-sql-url"; checkValue = "mysql://u:p@db/yarilo"; }; }
      '';
      description = ''
        Secrets the configuration reads as `credential:NAME`.
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Open the client-facing ports the enabled components bind
        (services.imap, imaps, pop3, …). Internal ports (auth, locks,
        warden, director) and telemetry stay closed: open them on the
        cluster's interface only.
      '';
    };

    checkConfig = mkOption {
      type = types.bool;
      default = true;
      description = "Check every rendered configuration with `yarilo config check` at build time.";
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = enabled != { };
        message = "services.yarilo: enable at least one component, e.g. services.yarilo.components.single.enable = true";
      }
      {
        assertion = !(enabled ? single) || attrNames enabled == [ "single" ];
        message = "services.yarilo: `single` runs every protocol itself; enable it alone";
      }
    ] ++ map
      (name: {
        assertion = components ? ${name};
        message = "services.yarilo.components.${name}: unknown component; known: ${concatStringsSep ", " (attrNames components)}";
      })
      (attrNames cfg.components);

    users.users = optionalAttrs (cfg.user == "yarilo") {
      yarilo = {
        isSystemUser = true;
        inherit (cfg) group;
        home = cfg.dataDir;
      };
    };
    users.groups = optionalAttrs (cfg.group == "yarilo") { yarilo = { }; };

    environment.systemPackages = [ cfg.package ];
    environment.etc."yarilo/yarilo.yaml".source =
      checkedConfig "shared" (format.generate "yarilo.yaml" cfg.settings);

    systemd.services = mapAttrs' unit (filterAttrs (name: _: components ? ${name}) enabled);

    networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall
      (unique (concatMap (name: componentPorts name enabled.${name})
        (filter (name: components ? ${name}) (attrNames enabled))));
  };
}
