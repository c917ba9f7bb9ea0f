module baton.dev/baton

go 1.21
