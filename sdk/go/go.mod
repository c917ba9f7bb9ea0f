module baton.dev/sdk/go

go 1.26
