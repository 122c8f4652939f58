{
  description = "yarilo: a clustered mail server (IMAP, POP3, LMTP, Submission) on Dovecot's director model";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.05";
    crane.url = "github:ipetkov/crane";
  };

  outputs = { self, nixpkgs, crane }:
    let
      inherit (nixpkgs) lib;
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      workspace = (lib.importTOML ./Cargo.toml).workspace.package;
      build = pkgs: import ./nix/build.nix {
        inherit pkgs;
        inherit (workspace) version;
        craneLib = crane.mkLib pkgs;
        revision = self.rev or self.dirtyRev or "unknown";
        source = workspace.repository;
        licence = workspace.license;
      };
    in
    {
      packages = forAllSystems (pkgs:
        let yarilo = build pkgs; in {
          inherit (yarilo) yarilo image;
          default = yarilo.yarilo;
        });

      checks = forAllSystems (pkgs:
        (build pkgs).checks // {
          nixos-single = pkgs.testers.runNixOSTest (import ./nixos/tests/single.nix { inherit self; });
          nixos-director = pkgs.testers.runNixOSTest (import ./nixos/tests/director.nix { inherit self; });
        });

      nixosModules.default = { lib, pkgs, ... }: {
        imports = [ ./nixos/module.nix ];
        services.yarilo.package = lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.yarilo;
      };

      overlays.default = final: _prev: {
        yarilo = self.packages.${final.stdenv.hostPlatform.system}.yarilo;
      };

      devShells = forAllSystems (pkgs: {
        default = (crane.mkLib pkgs).devShell {
          checks = self.checks.${pkgs.stdenv.hostPlatform.system};
          packages = with pkgs; [
            cargo-nextest
            cargo-deny
            deadnix
            nixpkgs-fmt
            redis
            skopeo
            sqlite
            umoci
          ];
        };
      });

      formatter = forAllSystems (pkgs: pkgs.nixpkgs-fmt);
    };
}
